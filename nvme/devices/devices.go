package devices

import (
	"bufio"
	"context"
	"fmt"
	"os"

	"github.com/strata-llm/strata/nvme/volume"
)

// WritePool stores the file at path on v as extent name and reads it back
// to verify its checksum, so that a pool is only announced once it is
// intact on the device.
func WritePool(ctx context.Context, v *volume.Volume, name, path string) (volume.Extent, error) {
	f, err := os.Open(path)
	if err != nil {
		return volume.Extent{}, fmt.Errorf("devices: write pool: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return volume.Extent{}, fmt.Errorf("devices: write pool: %w", err)
	}
	e, err := v.WriteFile(ctx, name, bufio.NewReaderSize(f, 1<<20), st.Size())
	if err != nil {
		return volume.Extent{}, err
	}
	if err := v.Verify(ctx, e); err != nil {
		return e, fmt.Errorf("devices: pool %q written but does not verify: %w", name, err)
	}
	return e, nil
}
