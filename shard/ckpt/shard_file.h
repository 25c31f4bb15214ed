// One rank's checkpoint shard: "rank_00003-of-00008.shard".
//
//   0   char[8]  magic "SHRDCKPT"
//   8   u32      format version (kShardFormatVersion)
//   12  u32      reserved (0)
//   16  u64      header length H
//   24  H bytes  JSON header: step, world, rank, shard_rank, shard_count,
//                model_hash, units [{name, numel, begin, count, offset[, dtype]}]
//   ... zero padding to a 64-byte boundary: the data section
//   per unit: master params[count], Adam m[count], Adam v[count], in the
//   unit's dtype: fp32, or bf16 (optim.state_dtype: bf16, the state as held)
//
// Format version 1 holds fp32 units only (no dtype key); a file with a bf16
// unit is version 2, so a shardd that predates bf16 state refuses it by its
// version instead of misreading it. Both versions are read.
//
// A unit entry holds elements [begin, begin+count) of the unit's unpadded flat
// buffer — coordinates that do not depend on the world size, so any later
// layout can read the ranges it needs (resharding). All little-endian.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/tensor/dtype.h"

namespace shard {

inline constexpr char kShardMagic[8] = {'S', 'H', 'R', 'D', 'C', 'K', 'P', 'T'};
inline constexpr uint32_t kShardFormatVersion = 1;       // fp32 units only
inline constexpr uint32_t kShardFormatVersionBf16 = 2;   // some unit is bf16

struct ShardUnit {
  std::string name;
  int64_t numel = 0;   // the unit's full unpadded size
  int64_t begin = 0;   // first element held
  int64_t count = 0;   // elements held
  uint64_t offset = 0; // byte offset of params inside the data section (m, v follow)
  DType dtype = DType::kF32;  // of params, m and v: kF32 or kBF16
};

struct ShardHeader {
  int64_t step = 0;
  int world = 1;
  int rank = 0;
  int shard_rank = 0;
  int shard_count = 1;
  uint64_t model_hash = 0;
  std::vector<ShardUnit> units;
};

// "rank_00003-of-00008.shard"
std::string ShardFileName(int shard_rank, int shard_count);

// The data of one unit to be written: three arrays of `count` elements of
// the header unit's dtype (floats, or bf16 bit patterns).
struct ShardUnitData {
  const void* params = nullptr;
  const void* m = nullptr;
  const void* v = nullptr;
};

struct WrittenFile {
  std::string name;  // file name inside the step directory
  uint64_t size = 0;
  uint64_t xxh64 = 0;
};

// Writes the shard atomically (temp name, fsync, rename, fsync dir) and returns
// its size and checksum (computed while writing). Any write/fsync error is
// returned; nothing is left under the final name.
StatusOr<WrittenFile> WriteShardFile(const std::string& step_dir, const ShardHeader& header,
                                     const std::vector<ShardUnitData>& data);

// Parses and bounds-checks a shard file's header (and its size against the
// data the header promises). Errors name the file.
class ShardFileReader {
 public:
  static StatusOr<ShardFileReader> Open(const std::string& path);
  const ShardHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  // Reads `n` elements starting at element `from` (unit coordinates) of unit
  // `u`'s params (which=0), m (1) or v (2), widened to fp32 from a bf16 unit
  // (exact: every bf16 is an fp32).
  Status Read(int u, int which, int64_t from, int64_t n, float* dst) const;

 private:
  std::string path_;
  ShardHeader header_;
  uint64_t data_start_ = 0;
  uint64_t file_size_ = 0;
};

}  // namespace shard
