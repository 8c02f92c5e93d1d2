package store

import "strings"

// clusterSlots is how many hash slots a Redis Cluster has.
const clusterSlots = 16384

// hashSlot is the Redis Cluster slot of key: CRC16 (XMODEM) of its hash
// tag, the part between the first '{' and the next '}' when that part is
// not empty, else of the whole key, modulo 16384 (the Cluster
// specification's HASH_SLOT). One script may touch keys of one slot only.
func hashSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % clusterSlots)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the one
// Redis Cluster uses.
func crc16(s string) uint16 {
	var crc uint16
	for i := range len(s) {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
