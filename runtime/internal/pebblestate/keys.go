package pebblestate

import "encoding/binary"

// AppendKeyPrefix appends the prefix of state id's keys in key group kg
// (see the package's key layout).
func AppendKeyPrefix(dst []byte, kg int, id uint16) []byte {
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(dst, uint16(kg)), id)
}

// KeyGroupBound is the first key of key group kg.
func KeyGroupBound(kg int) []byte { return binary.BigEndian.AppendUint16(nil, uint16(kg)) }

// KeyGroupEnd is the first key after key group kg's (nil after the last
// possible one).
func KeyGroupEnd(kg int) []byte {
	if kg >= 0xffff {
		return nil
	}
	return KeyGroupBound(kg + 1)
}
