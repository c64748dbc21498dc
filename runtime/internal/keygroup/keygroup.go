package keygroup

import (
	"fmt"
	"math/bits"
	"reflect"
	"unsafe"
)

// DefaultMaxParallelism is the number of key groups of a job that does not
// set its max parallelism, as in Flink for small jobs.
const DefaultMaxParallelism = 128

// UpperBoundMaxParallelism is the largest supported number of key groups
// (Flink's 2^15).
const UpperBoundMaxParallelism = 1 << 15

// ForHash maps a key hash to its key group in [0, maxParallelism).
func ForHash(hash uint32, maxParallelism int) int {
	return int(hash % uint32(maxParallelism))
}

// Subtask maps a key group to the subtask that owns it at parallelism.
// Each subtask owns one contiguous range of key groups.
func Subtask(keyGroup, parallelism, maxParallelism int) int {
	return keyGroup * parallelism / maxParallelism
}

// Range is the key groups subtask owns at parallelism, lo to hi
// inclusive: the key groups Subtask maps to it.
func Range(subtask, parallelism, maxParallelism int) (lo, hi int) {
	lo = (subtask*maxParallelism + parallelism - 1) / parallelism
	hi = ((subtask+1)*maxParallelism+parallelism-1)/parallelism - 1
	return lo, hi
}

// HashString is the stable key hash of a string key: murmur3 (32 bit, seed
// 0) of its UTF-8 bytes.
func HashString(s string) uint32 {
	return murmur3String(s, 0)
}

// HashInt64 is the stable key hash of an integer key: murmur3 of its eight
// little-endian bytes. Every signed and unsigned integer kind is widened to
// 64 bits first, so int32(7) and int64(7) land in the same key group.
func HashInt64(v int64) uint32 {
	return murmur3Uint64(uint64(v), 0)
}

const (
	murmurC1 = 0xcc9e2d51
	murmurC2 = 0x1b873593
)

func murmurMixK(k uint32) uint32 {
	k *= murmurC1
	k = bits.RotateLeft32(k, 15)
	return k * murmurC2
}

func murmurMixH(h, k uint32) uint32 {
	h ^= k
	h = bits.RotateLeft32(h, 13)
	return h*5 + 0xe6546b64
}

func murmurFinal(h uint32, length int) uint32 {
	h ^= uint32(length)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// murmur3String is MurmurHash3_x86_32 over the bytes of s. It indexes the
// string directly, so hashing a key allocates nothing.
func murmur3String(s string, seed uint32) uint32 {
	h := seed
	n := len(s)
	i := 0
	for ; i+4 <= n; i += 4 {
		k := uint32(s[i]) | uint32(s[i+1])<<8 | uint32(s[i+2])<<16 | uint32(s[i+3])<<24
		h = murmurMixH(h, murmurMixK(k))
	}
	var k uint32
	switch n - i {
	case 3:
		k ^= uint32(s[i+2]) << 16
		fallthrough
	case 2:
		k ^= uint32(s[i+1]) << 8
		fallthrough
	case 1:
		k ^= uint32(s[i])
		h ^= murmurMixK(k)
	}
	return murmurFinal(h, n)
}

func murmur3Uint64(v uint64, seed uint32) uint32 {
	h := murmurMixH(seed, murmurMixK(uint32(v)))
	h = murmurMixH(h, murmurMixK(uint32(v>>32)))
	return murmurFinal(h, 8)
}

// StableHasher returns the stable hash function for key type K, chosen once
// when the graph is built so that routing a record does not box its key.
// Kinds with a byte representation that is the same in every process are
// supported: strings, integers and booleans, including named types over
// them. For any other key type it returns an error naming the type; the
// caller says what to use instead.
func StableHasher[K comparable]() (func(K) uint32, error) {
	t := reflect.TypeFor[K]()
	// The casts below reinterpret K as its underlying type, whose memory
	// layout it shares by definition of reflect.Kind.
	switch t.Kind() {
	case reflect.String:
		return func(k K) uint32 { return HashString(*(*string)(unsafe.Pointer(&k))) }, nil
	case reflect.Int:
		return func(k K) uint32 { return HashInt64(int64(*(*int)(unsafe.Pointer(&k)))) }, nil
	case reflect.Int8:
		return func(k K) uint32 { return HashInt64(int64(*(*int8)(unsafe.Pointer(&k)))) }, nil
	case reflect.Int16:
		return func(k K) uint32 { return HashInt64(int64(*(*int16)(unsafe.Pointer(&k)))) }, nil
	case reflect.Int32:
		return func(k K) uint32 { return HashInt64(int64(*(*int32)(unsafe.Pointer(&k)))) }, nil
	case reflect.Int64:
		return func(k K) uint32 { return HashInt64(*(*int64)(unsafe.Pointer(&k))) }, nil
	case reflect.Uint:
		return func(k K) uint32 { return HashInt64(int64(*(*uint)(unsafe.Pointer(&k)))) }, nil
	case reflect.Uint8:
		return func(k K) uint32 { return HashInt64(int64(*(*uint8)(unsafe.Pointer(&k)))) }, nil
	case reflect.Uint16:
		return func(k K) uint32 { return HashInt64(int64(*(*uint16)(unsafe.Pointer(&k)))) }, nil
	case reflect.Uint32:
		return func(k K) uint32 { return HashInt64(int64(*(*uint32)(unsafe.Pointer(&k)))) }, nil
	case reflect.Uint64:
		return func(k K) uint32 { return HashInt64(int64(*(*uint64)(unsafe.Pointer(&k)))) }, nil
	case reflect.Bool:
		return func(k K) uint32 {
			if *(*bool)(unsafe.Pointer(&k)) {
				return HashInt64(1)
			}
			return HashInt64(0)
		}, nil
	default:
		return nil, fmt.Errorf("key type %v has no stable hash (kind %v)", t, t.Kind())
	}
}
