package kernels

import (
	"strings"
	"testing"
)

// TestTuningFor pins the per-device choices: the sm_90 cubins on compute
// capability 9.0 alone, programmatic dependent launch from 9.0 on, the
// integer decode GEMVs everywhere.
func TestTuningFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		dev            DeviceInfo
		cubin, overlap bool
	}{
		{"H100/H200", DeviceInfo{Major: 9, Minor: 0, SMs: 132}, true, true},
		{"a later 9.x", DeviceInfo{Major: 9, Minor: 1, SMs: 132}, false, true},
		{"Blackwell", DeviceInfo{Major: 10, Minor: 0, SMs: 148}, false, true},
		{"A100", DeviceInfo{Major: 8, Minor: 0, SMs: 108}, false, false},
		{"Ada", DeviceInfo{Major: 8, Minor: 9, SMs: 128}, false, false},
		{"Pascal", DeviceInfo{Major: 6, Minor: 1, SMs: 20}, false, false},
	} {
		got := TuningFor(tc.dev)
		if got.Cubin != tc.cubin || got.Overlap != tc.overlap || !got.IntegerGEMV || !got.IntegerQ6K {
			t.Errorf("%s: %+v", tc.name, got)
		}
		if got.unroll != 0 || got.warps != 0 || got.gemvWarpsPerSM != 32 || got.gemvStaged.warps == 0 {
			t.Errorf("%s: forced geometry or sweep knobs in the device's tuning: %+v", tc.name, got)
		}
	}
}

// TestWithVariant: every listed variant applies and says what it does,
// each changes what its name says, they compose in order, and an unknown
// name is an error that lists the known ones.
func TestWithVariant(t *testing.T) {
	t.Parallel()
	base := TuningFor(DeviceInfo{Major: 9, Minor: 0, SMs: 132})
	for _, tc := range []struct {
		names []string
		want  func(Tuning) bool
	}{
		{[]string{"jit"}, func(t Tuning) bool { return !t.Cubin && t.Overlap && t.IntegerGEMV }},
		{[]string{"no-overlap"}, func(t Tuning) bool { return t.Cubin && !t.Overlap }},
		{[]string{"float-gemv"}, func(t Tuning) bool { return !t.IntegerGEMV && !t.IntegerQ6K }},
		{[]string{"float-q6k"}, func(t Tuning) bool { return t.IntegerGEMV && !t.IntegerQ6K }},
		{[]string{"jit", "no-overlap"}, func(t Tuning) bool { return !t.Cubin && !t.Overlap && t.IntegerQ6K }},
		{nil, func(t Tuning) bool { return t == base }},
	} {
		got, err := base.WithVariants(tc.names...)
		if err != nil || !tc.want(got) {
			t.Errorf("%v: %+v, %v", tc.names, got, err)
		}
	}
	names := map[string]bool{}
	for _, v := range Variants() {
		if v.Name == "" || v.What == "" || names[v.Name] {
			t.Errorf("variant %+v: want a unique name and what it does", v)
		}
		names[v.Name] = true
		if _, err := base.WithVariant(v.Name); err != nil {
			t.Errorf("%s: %v", v.Name, err)
		}
	}
	if _, err := base.WithVariant("pairs-off"); err == nil || !strings.Contains(err.Error(), "float-gemv") {
		t.Errorf("unknown variant: %v", err)
	}
}

// TestWithTuning: a view shares the load but not the tuning, and keeps the
// loaded image.
func TestWithTuning(t *testing.T) {
	t.Parallel()
	k := testKernels(132)
	k.tune.Cubin = true
	v := k.WithTuning(Tuning{IntegerGEMV: false})
	if v.loaded != k.loaded || !v.Tuning().Cubin || v.Tuning().IntegerGEMV || !k.Tuning().IntegerGEMV {
		t.Fatalf("view %+v of %+v", v.Tuning(), k.Tuning())
	}
}
