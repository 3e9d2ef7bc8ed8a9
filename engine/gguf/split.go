//go:build unix

package gguf

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// Metadata keys of llama.cpp's split models (gguf-split): every part carries
// its index and the part count; the first part also carries the total
// tensor count and all the model's other metadata.
const (
	SplitNoKey      = "split.no"
	SplitCountKey   = "split.count"
	SplitTensorsKey = "split.tensors.count"
)

// maxSplits bounds the part count a header may claim (llama.cpp writes it
// as a UINT16), so a corrupt file cannot make Map try to open millions.
const maxSplits = 1<<16 - 1

// splitName matches a split part's file name: PREFIX-00001-of-00003.gguf.
var splitName = regexp.MustCompile(`^(.+)-([0-9]{5})-of-([0-9]{5})\.gguf$`)

// SplitPath names part i (0-based) of n of a split model, as gguf-split
// and llama.cpp do: PREFIX-%05d-of-%05d.gguf.
func SplitPath(prefix string, i, n int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, i+1, n)
}

// splitKeys reads a file's split.no and split.count; count is 0 for a file
// that is not a split part.
func splitKeys(f *File) (no, count int, err error) {
	v, ok := f.Lookup(SplitCountKey)
	if !ok {
		return 0, 0, nil
	}
	c, isInt := asUint(v)
	if !isInt || c == 0 || c > maxSplits {
		return 0, 0, fmt.Errorf("%s is %v, want an integer in [1, %d]: %w", SplitCountKey, v, maxSplits, ErrInvalid)
	}
	n, isInt := f.Uint(SplitNoKey)
	if _, present := f.Lookup(SplitNoKey); !present {
		n, isInt = 0, c == 1 // a single-part "split" needs no index
	}
	if !isInt || n >= c {
		v, _ := f.Lookup(SplitNoKey)
		return 0, 0, fmt.Errorf("%s is %v, want an integer in [0, %d): %w", SplitNoKey, v, c, ErrInvalid)
	}
	return int(n), int(c), nil
}

// mapSplit completes Map (MapShared, ReadHeader: mode) for a split model
// whose part path was opened as first: it opens the other parts the same
// way (named by SplitPath from the same prefix),
// checks that each is the part its name says, of the same count, and that
// the parts' tensors add up to split.tensors.count with no name twice, and
// returns one Mapped over them all. Anything else is returned as it was.
func mapSplit(path string, first *Mapped, mode holdMode) (*Mapped, error) {
	no, n, err := splitKeys(first.File)
	if err != nil {
		first.Close()
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	if n <= 1 {
		return first, nil
	}
	sub := splitName.FindStringSubmatch(filepath.Base(path))
	if sub == nil {
		first.Close()
		return nil, fmt.Errorf("gguf: %s is part %d of a model split in %d, but its name is not PREFIX-%05d-of-%05d.gguf, so the other parts cannot be found",
			path, no+1, n, no+1, n)
	}
	prefix := filepath.Join(filepath.Dir(path), sub[1])
	if no != 0 {
		first.Close()
		return nil, fmt.Errorf("gguf: %s is part %d of a model split in %d: open its first part, %s", path, no+1, n, SplitPath(prefix, 0, n))
	}
	if num, _ := strconv.Atoi(sub[2]); num != 1 {
		first.Close()
		return nil, fmt.Errorf("gguf: %s says it is part 1 of %d but is named as part %d: %w", path, n, num, ErrInvalid)
	}
	if count, _ := strconv.Atoi(sub[3]); count != n {
		first.Close()
		return nil, fmt.Errorf("gguf: %s says the model has %d parts but is named as one of %d: %w", path, n, count, ErrInvalid)
	}

	f := *first.File // the merged header: the first part's metadata, every part's tensors
	f.Tensors = append([]TensorInfo(nil), first.Tensors...)
	f.parts = make([]*File, n)
	m := &Mapped{File: &f, m: first.m, data: first.data, parts: make([]*Mapped, n)}
	fail := func(err error) (*Mapped, error) {
		m.Close()
		return nil, err
	}
	for i := 1; i < n; i++ {
		p := SplitPath(prefix, i, n)
		pm, err := mapOne(p, mode)
		if err != nil {
			return fail(fmt.Errorf("gguf: part %d of %d of split model %s: %w", i+1, n, path, err))
		}
		m.parts[i], f.parts[i] = pm, pm.File
		pno, pn, err := splitKeys(pm.File)
		if err != nil {
			return fail(fmt.Errorf("gguf: %s: %w", p, err))
		}
		if pn != n || pno != i {
			return fail(fmt.Errorf("gguf: %s says it is part %d of %d, want part %d of %d: %w", p, pno+1, pn, i+1, n, ErrInvalid))
		}
		for _, ti := range pm.Tensors {
			ti.part = i
			f.Tensors = append(f.Tensors, ti)
		}
		f.Size += pm.Size
	}
	if v, ok := f.Lookup(SplitTensorsKey); ok {
		if want, isInt := asUint(v); !isInt || want != uint64(len(f.Tensors)) {
			return fail(fmt.Errorf("gguf: %s: %s is %v but the %d parts hold %d tensors: %w",
				path, SplitTensorsKey, v, n, len(f.Tensors), ErrInvalid))
		}
	}
	f.tenIndex = sortedIndex(len(f.Tensors), func(i int) string { return f.Tensors[i].Name })
	for i := 1; i < len(f.tenIndex); i++ {
		if a, b := &f.Tensors[f.tenIndex[i-1]], &f.Tensors[f.tenIndex[i]]; a.Name == b.Name {
			return fail(fmt.Errorf("gguf: split model %s: tensor %q is in part %d and part %d: %w",
				path, a.Name, min(a.part, b.part)+1, max(a.part, b.part)+1, ErrInvalid))
		}
	}
	return m, nil
}

// WriteSplit writes src as a model split in n parts, PREFIX-00001-of-0000n.gguf
// and on, the way gguf-split does: the tensors in file order, shared out as
// evenly as their count allows; the first part with all of src's metadata,
// every part with split.no, split.count and split.tensors.count. It returns
// the parts' paths.
func WriteSplit(src *Mapped, prefix string, n int) ([]string, error) {
	if n < 1 || n > maxSplits || n > len(src.Tensors) {
		return nil, fmt.Errorf("gguf: cannot split %d tensors in %d parts", len(src.Tensors), n)
	}
	var paths []string
	for i := 0; i < n; i++ {
		lo, hi := i*len(src.Tensors)/n, (i+1)*len(src.Tensors)/n
		w := NewWriter(src.Version)
		if err := w.SetAlignment(src.Alignment); err != nil {
			return nil, err
		}
		if i == 0 {
			for _, kv := range src.KV {
				if kv.Key == SplitNoKey || kv.Key == SplitCountKey || kv.Key == SplitTensorsKey {
					continue
				}
				if err := w.AddKV(kv.Key, kv.Value); err != nil {
					return nil, err
				}
			}
		}
		for _, kv := range []KV{{SplitNoKey, uint16(i)}, {SplitCountKey, uint16(n)}, {SplitTensorsKey, int32(len(src.Tensors))}} {
			if err := w.AddKV(kv.Key, kv.Value); err != nil {
				return nil, err
			}
		}
		part := src.Tensors[lo:hi]
		for _, ti := range part {
			if err := w.AddTensor(ti.Name, ti.Type, ti.Dims); err != nil {
				return nil, err
			}
		}
		p := SplitPath(prefix, i, n)
		if err := writeGGUF(p, w, func(j int, _ TensorInfo, dst io.Writer) error {
			b := src.Data(&part[j])
			if b == nil {
				return fmt.Errorf("tensor %q: no data", part[j].Name)
			}
			_, err := dst.Write(b)
			return err
		}); err != nil {
			return nil, fmt.Errorf("gguf: writing %s: %w", p, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// writeGGUF writes w to a new file at path.
func writeGGUF(path string, w *Writer, data func(int, TensorInfo, io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := w.WriteTo(f, data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// SplitParts parses a split part's file name (PREFIX-00002-of-00003.gguf):
// PREFIX, the part's number (1-based) and the part count; ok is false for
// other names.
func SplitParts(name string) (prefix string, no, count int, ok bool) {
	sub := splitName.FindStringSubmatch(name)
	if sub == nil {
		return "", 0, 0, false
	}
	no, _ = strconv.Atoi(sub[2])
	count, _ = strconv.Atoi(sub[3])
	return sub[1], no, count, true
}

// SplitPrefix returns PREFIX for a split part's file name
// (PREFIX-00001-of-00003.gguf), so a split model can be named as the
// single file would be; ok is false for other names.
func SplitPrefix(name string) (prefix string, ok bool) {
	sub := splitName.FindStringSubmatch(name)
	if sub == nil {
		return "", false
	}
	return sub[1], true
}
