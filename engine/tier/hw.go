package tier

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// MemInfo holds the /proc/meminfo fields the planner's defaults use, in
// bytes.
type MemInfo struct {
	Total, Available int64
}

// ReadMemInfo reads /proc/meminfo.
func ReadMemInfo() (MemInfo, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return MemInfo{}, fmt.Errorf("reading memory size: %w", err)
	}
	defer f.Close()
	mi, err := parseMemInfo(f)
	if err != nil {
		return MemInfo{}, fmt.Errorf("/proc/meminfo: %w", err)
	}
	return mi, nil
}

// parseMemInfo reads MemTotal and MemAvailable ("Key:   123 kB" lines).
func parseMemInfo(r io.Reader) (MemInfo, error) {
	var mi MemInfo
	var haveTotal, haveAvail bool
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "MemTotal" && key != "MemAvailable") {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 || len(fields) > 2 || (len(fields) == 2 && fields[1] != "kB") {
			return mi, fmt.Errorf("malformed %s line %q", key, sc.Text())
		}
		v, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || v < 0 || v > 1<<50 {
			return mi, fmt.Errorf("malformed %s value %q", key, fields[0])
		}
		if len(fields) == 2 {
			v *= 1024
		}
		if key == "MemTotal" {
			mi.Total, haveTotal = v, true
		} else {
			mi.Available, haveAvail = v, true
		}
	}
	if err := sc.Err(); err != nil {
		return mi, err
	}
	if !haveTotal || !haveAvail {
		return mi, fmt.Errorf("no MemTotal or MemAvailable line")
	}
	return mi, nil
}

// HostReserve is what the default host budget leaves to the rest of the
// system: a tenth of the memory, at least 1 GiB, at most 8 GiB.
func HostReserve(mi MemInfo) int64 {
	return min(max(mi.Total/10, 1<<30), 8<<30)
}

// DefaultHostBudget is MemAvailable minus HostReserve (never negative):
// the default RAM budget, and the device budget of the CPU backend.
func DefaultHostBudget(mi MemInfo) int64 {
	return max(mi.Available-HostReserve(mi), 0)
}
