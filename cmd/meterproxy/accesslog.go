package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/meterproxy/meterproxy/proxy"
	"golang.org/x/sys/unix"
)

// validateAccess checks log.access, changing nothing: stdout, stderr, off,
// or the path of a file meterproxy can append to — an existing regular
// file it may write, or a new one in a directory it may write in.
func validateAccess(dest string) error {
	switch dest {
	case proxy.AccessStdout, proxy.AccessStderr, proxy.AccessOff:
		return nil
	case "":
		return errors.New("must be stdout, stderr, off or a file's path, got an empty string")
	}
	fi, err := os.Stat(dest)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("%s is a directory: name a file in it", dest)
	case err == nil && !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", dest)
	case err == nil:
		if err := unix.Access(dest, unix.W_OK); err != nil {
			return fmt.Errorf("%s cannot be written: %w", dest, err)
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s: %w", dest, err)
	}
	dir := filepath.Dir(dest)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s: its directory %s does not exist", dest, dir)
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("%s cannot be created: its directory %s is not writable: %w", dest, dir, err)
	}
	return nil
}

// reopenOnHUP reopens the access log's file on every SIGHUP until ctx
// ends (logrotate moves the file, then sends it); the same SIGHUP reloads
// the configuration (reload.go).
func reopenOnHUP(ctx context.Context, access *proxy.AccessLog, log *slog.Logger) {
	if access == nil {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := access.Reopen(ctx); err != nil {
				log.Error("access_log_reopen_failed", slog.String("error", err.Error()))
			} else {
				log.Info("access_log_reopened")
			}
		}
	}
}

// closeAccess writes the access log's queued lines and closes it.
func closeAccess(access *proxy.AccessLog) {
	if access != nil {
		_ = access.Close()
	}
}
