// Package classify decides who is calling and in which admission class a
// request belongs.
//
// A caller is identified by the SHA-256 of the API key it presents (see
// [Credential]), compared in constant time against the hashes in the
// callers list; callers never change code to be metered. The class comes,
// in order of precedence, from the class header (any caller may mark itself
// bulk; only callers allowed to may claim interactive), the caller's
// configured class, the first matching path rule, and the default class.
//
// The package is pure: it does no I/O, keeps no globals and logs nothing.
// The environment is read through an injected getenv function, and raw keys
// are never stored, returned or printed in errors.
package classify
