package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTick = 100

// cpuTime is the user + system CPU time a process has used so far.
func cpuTime(pid int) (time.Duration, error) {
	_, cpu, err := procStat(pid)
	return cpu, err
}

// groupCPUTime is the user + system CPU time the processes of process
// group pgid (nginx's master and its workers) have used so far, summed
// over every process in the group now.
func groupCPUTime(pgid int) (time.Duration, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	found := false
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		group, cpu, err := procStat(pid)
		if err != nil || group != pgid {
			continue // gone since ReadDir, or another group's
		}
		sum, found = sum+cpu, true
	}
	if !found {
		return 0, fmt.Errorf("no process in group %d", pgid)
	}
	return sum, nil
}

// procStat reads a process's group (field 5 of /proc/<pid>/stat) and its
// user + system CPU time so far (fields 14 and 15).
func procStat(pid int) (pgrp int, cpu time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces; fields after ")" are fixed.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	group, err0 := strconv.Atoi(fields[2])              // field 5
	utime, err1 := strconv.ParseInt(fields[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(fields[12], 10, 64) // field 15
	if err0 != nil || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, errors.Join(err0, err1, err2))
	}
	return group, time.Duration(utime+stime) * time.Second / clockTick, nil
}

// memory is a process's resident set now (VmRSS) and at its peak (VmHWM).
func memory(pid int) (rss, peak int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	return rss, peak, sc.Err()
}
