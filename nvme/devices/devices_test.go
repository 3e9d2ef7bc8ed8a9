package devices_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/nvme/devices"
	"github.com/strata-llm/strata/nvme/volume"
)

func TestWritePool(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	img, _ := os.Create(filepath.Join(dir, "ns.img"))
	defer img.Close()
	img.Truncate(8 << 20)
	dev, err := volume.NewFileDevice(img, 512)
	if err != nil {
		t.Fatal(err)
	}
	v, err := volume.Format(context.Background(), dev, volume.FormatOptions{TableBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	pool := bytes.Repeat([]byte("layer bytes "), 100000)
	path := filepath.Join(dir, "m.pool")
	os.WriteFile(path, pool, 0o644)
	e, err := devices.WritePool(context.Background(), v, "m.pool", path)
	if err != nil || e.Length != int64(len(pool)) {
		t.Fatalf("%+v %v", e, err)
	}
	if _, err := devices.WritePool(context.Background(), v, "missing", filepath.Join(dir, "nope")); err == nil {
		t.Error("missing file accepted")
	}
}
