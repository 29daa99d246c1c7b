// Package redistest gives a test a real redis-server of its own.
//
// [Start] runs redis-server on a free loopback port with persistence off and
// its files in the test's temporary directory, waits until it answers PING,
// and kills it when the test ends; concurrent tests each get their own
// server. When REDIS_URL is set, Start uses that server instead and never
// flushes, pauses or kills it, so tests must keep to their own keys: take a
// fresh prefix from [Prefix].
//
// Fault tests can [Server.Kill], [Server.Restart] (same port, empty data)
// and [Server.Pause] a server they own, and read what Redis executed with
// [Server.CommandStats] and [Server.TotalCommands].
//
// Tests of replicated and encrypted Redis get groups of processes of their
// own, whatever REDIS_URL says: [StartCluster] (three masters with a replica
// each, joined by redis-cli; [Cluster.MasterFor], [Cluster.KillNode],
// [Cluster.WaitFailover]), [StartSentinel] (a master, its replica and three
// sentinels; [Sentinel.KillMaster], [Sentinel.WaitFailover]) and
// [StartTLS] (TLS only, with a CA made at test time; [TLSServer.CAFile]).
// Their timeouts are short, so a killed master's replica takes over within
// a few seconds.
//
// If redis-server is not on PATH and REDIS_URL is unset, Start fails the test
// with how to install it: a missing server is a broken environment, not a
// reason to skip.
package redistest
