package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/strata-llm/strata/internal/safefs"
)

// sortedChecked returns tensors sorted by name after checking that names are
// unique and non-empty, dtypes known, and data lengths match shapes.
func sortedChecked(tensors []Tensor) ([]Tensor, error) {
	ts := append([]Tensor(nil), tensors...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	for i, t := range ts {
		if t.Name == "" || t.Name == "__metadata__" {
			return nil, fmt.Errorf("safetensors: invalid tensor name %q", t.Name)
		}
		if i > 0 && ts[i-1].Name == t.Name {
			return nil, fmt.Errorf("safetensors: duplicate tensor %q", t.Name)
		}
		size, ok := dtypeSizes[t.DType]
		if !ok {
			return nil, fmt.Errorf("safetensors: tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		n, err := numElements(t.Shape)
		if err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
		}
		if mulSat(n, size) != int64(len(t.Data)) {
			return nil, fmt.Errorf("safetensors: tensor %q: %d data bytes do not match shape %v of %s", t.Name, len(t.Data), t.Shape, t.DType)
		}
	}
	return ts, nil
}

type jsonEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// encodeHeader returns the length prefix and JSON header (space-padded to a
// multiple of 8 bytes so the data section is 8-byte aligned) for tensors that
// are already sorted and checked.
func encodeHeader(ts []Tensor, meta map[string]string) ([]byte, error) {
	obj := make(map[string]any, len(ts)+1)
	if len(meta) > 0 {
		obj["__metadata__"] = meta
	}
	var off int64
	for _, t := range ts {
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		obj[t.Name] = jsonEntry{DType: t.DType, Shape: shape, DataOffsets: [2]int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	js, err := json.Marshal(obj) // map keys come out sorted: deterministic
	if err != nil {
		return nil, fmt.Errorf("safetensors: encode header: %w", err)
	}
	pad := (8 - len(js)%8) % 8
	out := make([]byte, 8, 8+len(js)+pad)
	binary.LittleEndian.PutUint64(out, uint64(len(js)+pad))
	out = append(out, js...)
	for i := 0; i < pad; i++ {
		out = append(out, ' ')
	}
	return out, nil
}

// Encode writes a safetensors image of tensors (sorted by name) with the
// given __metadata__ to w.
func Encode(w io.Writer, tensors []Tensor, meta map[string]string) error {
	ts, err := sortedChecked(tensors)
	if err != nil {
		return err
	}
	return encode(w, ts, meta)
}

func encode(w io.Writer, ts []Tensor, meta map[string]string) error {
	hdr, err := encodeHeader(ts, meta)
	if err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("safetensors: write header: %w", err)
	}
	for _, t := range ts {
		if _, err := w.Write(t.Data); err != nil {
			return fmt.Errorf("safetensors: write tensor %q: %w", t.Name, err)
		}
	}
	return nil
}

// WriteFile writes tensors (sorted by name) to a safetensors file at path.
// The file is written to path+".tmp" and renamed into place, so a failure
// never leaves a truncated file under path.
func WriteFile(path string, tensors []Tensor, meta map[string]string) error {
	ts, err := sortedChecked(tensors)
	if err != nil {
		return err
	}
	return atomicWrite(path, func(w io.Writer) error { return encode(w, ts, meta) })
}

// atomicWrite creates path+".tmp", lets fill write it through a buffer,
// syncs and renames it to path; on any error the temporary file is removed.
func atomicWrite(path string, fill func(w io.Writer) error) (err error) {
	f, err := safefs.CreateTemp(path, 0o644)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := fill(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: write %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("safetensors: close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// ShardName returns the Hugging Face name of shard i (1-based) of n, e.g.
// model-00001-of-00004.safetensors.
func ShardName(i, n int) string {
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", i, n)
}

// WriteDir writes a Hugging Face model directory: config.json (when config
// is not nil, indented JSON) and the tensors, sorted by name, either as one
// model.safetensors when their data fits in maxShardBytes (or maxShardBytes
// <= 0), or as consecutive shards of at most maxShardBytes of tensor data
// each (a single larger tensor gets a shard of its own) plus
// model.safetensors.index.json. Files carry __metadata__ {"format": "pt"} as
// transformers writes. The directory is created if needed; a stale
// model.safetensors or index of the other layout is removed so OpenDir reads
// what was just written.
func WriteDir(dir string, config any, tensors []Tensor, maxShardBytes int64) error {
	ts, err := sortedChecked(tensors)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if config != nil {
		js, err := json.MarshalIndent(config, "", "  ")
		if err != nil {
			return fmt.Errorf("safetensors: encode config: %w", err)
		}
		js = append(js, '\n')
		err = atomicWrite(filepath.Join(dir, ConfigFile), func(w io.Writer) error {
			_, err := w.Write(js)
			return err
		})
		if err != nil {
			return err
		}
	}
	meta := map[string]string{"format": "pt"}
	var total int64
	for _, t := range ts {
		total += int64(len(t.Data))
	}
	if maxShardBytes <= 0 || total <= maxShardBytes {
		if err := removeIfExists(filepath.Join(dir, IndexFile)); err != nil {
			return err
		}
		return atomicWrite(filepath.Join(dir, SingleFile), func(w io.Writer) error { return encode(w, ts, meta) })
	}

	var shards [][]Tensor
	var cur []Tensor
	var curBytes int64
	for _, t := range ts {
		n := int64(len(t.Data))
		if len(cur) > 0 && curBytes+n > maxShardBytes {
			shards = append(shards, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, t)
		curBytes += n
	}
	if len(cur) > 0 {
		shards = append(shards, cur)
	}
	if err := removeIfExists(filepath.Join(dir, SingleFile)); err != nil {
		return err
	}
	weightMap := map[string]string{}
	for i, sh := range shards {
		name := ShardName(i+1, len(shards))
		for _, t := range sh {
			weightMap[t.Name] = name
		}
		if err := atomicWrite(filepath.Join(dir, name), func(w io.Writer) error { return encode(w, sh, meta) }); err != nil {
			return err
		}
	}
	idx := map[string]any{
		"metadata":   map[string]any{"total_size": total},
		"weight_map": weightMap,
	}
	js, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("safetensors: encode index: %w", err)
	}
	js = append(js, '\n')
	return atomicWrite(filepath.Join(dir, IndexFile), func(w io.Writer) error {
		_, err := w.Write(js)
		return err
	})
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("safetensors: remove stale %s: %w", path, err)
	}
	return nil
}
