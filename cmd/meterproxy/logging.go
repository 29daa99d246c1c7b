package main

import (
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/lmittmann/tint"
	"github.com/mattn/go-isatty"
)

// newLogger returns tint on a terminal and JSON otherwise (log.format auto),
// at log.level. Text is coloured only on a terminal: written to a file or
// a pipe, colour codes are noise in every line.
func newLogger(cfg LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Level)) // validated: debug, info, warn, error
	f, ok := w.(*os.File)
	tty := ok && isatty.IsTerminal(f.Fd())
	format := cfg.Format
	if format == "auto" {
		format = "json"
		if tty {
			format = "text"
		}
	}
	if format == "text" {
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: level, TimeFormat: time.TimeOnly,
			ReplaceAttr: durationsAsText, NoColor: !tty}))
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsText}))
}

// durationsAsText logs a duration as Go writes it ("30s", "1.5ms"), not
// as the integer nanoseconds slog's JSON gives it.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
