package cpubench

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// sysCPU is where the kernel describes each CPU's caches.
const sysCPU = "/sys/devices/system/cpu"

// cpuModel is /proc/cpuinfo's model name of the first CPU, or "".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// lastLevelCache is the total size of the distinct last-level caches
// (level 3, else the highest level sysfs shows) that cpus share: the most
// of a buffer that could still be cached when it is read again. 0 when
// sysfs says nothing.
func lastLevelCache(cpus []int) int64 {
	type cache struct {
		level int
		size  int64
	}
	byShared := map[string]cache{} // one entry per cache instance
	top := 0
	for _, c := range cpus {
		dirs, _ := filepath.Glob(filepath.Join(sysCPU, "cpu"+strconv.Itoa(c), "cache", "index*"))
		for _, d := range dirs {
			read := func(name string) string {
				b, _ := os.ReadFile(filepath.Join(d, name))
				return strings.TrimSpace(string(b))
			}
			if t := read("type"); t != "Unified" && t != "Data" {
				continue
			}
			level, err := strconv.Atoi(read("level"))
			size := parseCacheSize(read("size"))
			if err != nil || size <= 0 {
				continue
			}
			byShared[strconv.Itoa(level)+"/"+read("shared_cpu_list")] = cache{level, size}
			top = max(top, level)
		}
	}
	var total int64
	for _, c := range byShared {
		if c.level == top {
			total += c.size
		}
	}
	return total
}

// parseCacheSize reads sysfs's cache sizes ("32768K", "2M"), or -1.
func parseCacheSize(s string) int64 {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return -1
	}
	return v * mult
}
