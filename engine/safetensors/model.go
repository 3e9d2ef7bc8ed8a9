package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/hostmem"
)

// File names of a Hugging Face model directory.
const (
	ConfigFile = "config.json"
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// Tensor is one named tensor. Shape is in PyTorch order (last dimension
// fastest). Data holds the raw little-endian bytes; for tensors returned by
// Model.Tensor it aliases the read-only memory map and must not be written
// or used after Model.Close.
type Tensor struct {
	Name  string
	DType string
	Shape []int64
	Data  []byte
}

// NumElements returns the number of elements the shape describes.
func (t Tensor) NumElements() (int64, error) { return numElements(t.Shape) }

// Float32s decodes the tensor to float32. It supports F32, F16 and BF16 and
// checks that the data length matches the shape.
func (t Tensor) Float32s() ([]float32, error) {
	n, err := numElements(t.Shape)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	size, ok := dtypeSizes[t.DType]
	if !ok {
		return nil, fmt.Errorf("tensor %q: unknown dtype %q", t.Name, t.DType)
	}
	if n > math.MaxInt64/size || int64(len(t.Data)) != n*size {
		return nil, fmt.Errorf("tensor %q: %d data bytes do not match shape %v of %s", t.Name, len(t.Data), t.Shape, t.DType)
	}
	out := make([]float32, n)
	d := t.Data
	switch t.DType {
	case "F32":
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:]))
		}
	case "F16":
		for i := range out {
			out[i] = quant.F16ToF32(binary.LittleEndian.Uint16(d[2*i:]))
		}
	case "BF16":
		for i := range out {
			out[i] = quant.BF16ToF32(binary.LittleEndian.Uint16(d[2*i:]))
		}
	default:
		return nil, fmt.Errorf("tensor %q: cannot convert dtype %s to float32", t.Name, t.DType)
	}
	return out, nil
}

// mappedFile is one safetensors file in memory: mapped, or copied.
type mappedFile struct {
	path string
	m    hostmem.Held
	data []byte
	hdr  *header
}

func openFile(path string, copied bool) (*mappedFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors: %s is not a regular file", path)
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("safetensors: %s: %w: file is %d bytes, shorter than the 8-byte header length", path, ErrFormat, size)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("safetensors: %s: file of %d bytes too large to map", path, size)
	}
	m, err := hostmem.Hold(f, size, !copied)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	hdr, err := parseHeader(m.Bytes())
	if err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	return &mappedFile{path: path, m: m, data: m.Bytes(), hdr: hdr}, nil
}

func (f *mappedFile) close() error {
	if f.data == nil {
		return nil
	}
	err := f.m.Close()
	f.data = nil
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

type location struct {
	file  *mappedFile
	entry entry
}

// Model is an opened Hugging Face model directory.
type Model struct {
	// Dir is the directory the model was opened from.
	Dir string
	// Config is config.json decoded into generic JSON values (numbers are
	// float64). It is nil when the directory has no config.json.
	Config map[string]any
	// Metadata merges the __metadata__ maps of all files (e.g. "format": "pt").
	Metadata map[string]string

	files  []*mappedFile
	tensor map[string]location
	names  []string
}

// OpenDir opens a Hugging Face model directory: config.json (optional) and
// either model.safetensors or model.safetensors.index.json plus the shards it
// names. Like transformers, the single file wins when both exist. All files
// are mapped read-only, shared with the page cache, and validated; a missing
// shard, a tensor listed in the index but absent from its shard, or a tensor
// stored twice is an error. A mapped file truncated while its tensors are in
// use kills the process with SIGBUS: what serves requests uses LoadDir.
func OpenDir(dir string) (*Model, error) { return openDir(dir, false) }

// LoadDir is OpenDir with every file copied whole into anonymous memory
// (hostmem.SnapshotFile), as gguf.Map holds a GGUF: the tensors then stay
// what was loaded whatever happens to the files.
func LoadDir(dir string) (*Model, error) { return openDir(dir, true) }

// DirSize is the bytes of the safetensors files OpenDir would open in dir,
// found as it finds them but without opening them.
func DirSize(dir string) (int64, error) {
	paths, _, err := dirFiles(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return 0, fmt.Errorf("safetensors: %w", err)
		}
		n += st.Size()
	}
	return n, nil
}

// dirFiles finds dir's safetensors files: the single file, or the shards
// the index names (sorted) with its weight map.
func dirFiles(dir string) (paths []string, weightMap map[string]string, err error) {
	single := filepath.Join(dir, SingleFile)
	if _, err := os.Stat(single); err == nil {
		return []string{single}, nil, nil
	}
	idxPath := filepath.Join(dir, IndexFile)
	idxData, err := os.ReadFile(idxPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("safetensors: %s has neither %s nor %s", dir, SingleFile, IndexFile)
		}
		return nil, nil, fmt.Errorf("safetensors: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(idxData, &idx); err != nil {
		return nil, nil, fmt.Errorf("safetensors: %s: %w: %v", idxPath, ErrFormat, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, nil, fmt.Errorf("safetensors: %s: %w: empty weight_map", idxPath, ErrFormat)
	}
	shards := map[string]bool{}
	for name, file := range idx.WeightMap {
		if file == "" || file != filepath.Base(file) || file == "." || file == ".." || strings.ContainsAny(file, `/\`) {
			return nil, nil, fmt.Errorf("safetensors: %s: %w: tensor %q maps to invalid file name %q", idxPath, ErrFormat, name, file)
		}
		shards[file] = true
	}
	for f := range shards {
		paths = append(paths, filepath.Join(dir, f))
	}
	sort.Strings(paths)
	for _, p := range paths {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("safetensors: missing shard %s named by %s", filepath.Base(p), IndexFile)
		}
	}
	return paths, idx.WeightMap, nil
}

func openDir(dir string, copied bool) (*Model, error) {
	m := &Model{Dir: dir, Metadata: map[string]string{}, tensor: map[string]location{}}
	cfg, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	switch {
	case err == nil:
		if err := json.Unmarshal(cfg, &m.Config); err != nil {
			return nil, fmt.Errorf("safetensors: %s: %w", filepath.Join(dir, ConfigFile), err)
		}
	case errors.Is(err, os.ErrNotExist):
	default:
		return nil, fmt.Errorf("safetensors: %w", err)
	}

	paths, weightMap, err := dirFiles(dir)
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		if err := m.addFile(p, copied); err != nil {
			m.Close()
			return nil, err
		}
	}
	for name, file := range weightMap {
		loc, ok := m.tensor[name]
		if !ok || filepath.Base(loc.file.path) != file {
			m.Close()
			return nil, fmt.Errorf("safetensors: %s: %w: tensor %q is not in shard %s", filepath.Join(dir, IndexFile), ErrFormat, name, file)
		}
	}
	m.finish()
	return m, nil
}

func (m *Model) addFile(path string, copied bool) error {
	f, err := openFile(path, copied)
	if err != nil {
		return err
	}
	m.files = append(m.files, f)
	for k, v := range f.hdr.Meta {
		m.Metadata[k] = v
	}
	for _, e := range f.hdr.Entries {
		if prev, dup := m.tensor[e.Name]; dup {
			return fmt.Errorf("safetensors: %w: tensor %q stored in both %s and %s", ErrFormat, e.Name, prev.file.path, path)
		}
		m.tensor[e.Name] = location{file: f, entry: e}
	}
	return nil
}

func (m *Model) finish() {
	m.names = make([]string, 0, len(m.tensor))
	for n := range m.tensor {
		m.names = append(m.names, n)
	}
	sort.Strings(m.names)
}

// Names returns the tensor names, sorted.
func (m *Model) Names() []string { return append([]string(nil), m.names...) }

// Tensor returns the named tensor. Its Data aliases the memory map.
func (m *Model) Tensor(name string) (Tensor, error) {
	loc, ok := m.tensor[name]
	if !ok {
		return Tensor{}, fmt.Errorf("safetensors: no tensor %q in %s", name, m.Dir)
	}
	if loc.file.data == nil {
		return Tensor{}, fmt.Errorf("safetensors: model %s is closed", m.Dir)
	}
	e := loc.entry
	start := loc.file.hdr.DataStart
	return Tensor{
		Name:  e.Name,
		DType: e.DType,
		Shape: append(make([]int64, 0, len(e.Shape)), e.Shape...),
		Data:  loc.file.data[start+e.Begin : start+e.End : start+e.End],
	}, nil
}

// Close unmaps all files. Tensor data obtained earlier becomes invalid.
func (m *Model) Close() error {
	var first error
	for _, f := range m.files {
		if err := f.close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
