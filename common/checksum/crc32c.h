// CRC-32C (Castagnoli), as used by iSCSI, ext4 and LevelDB, for checkpoint
// integrity. Debian's Abseil 20220623 predates absl::crc32c.
#ifndef FULCRUM_COMMON_CHECKSUM_CRC32C_H_
#define FULCRUM_COMMON_CHECKSUM_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace fulcrum {

// CRC of data[0, n), continuing from `crc` (0 to start).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CHECKSUM_CRC32C_H_
