// The token files zerod reads and writes: llm.c's shards of 16- and 32-bit
// ids and zerod's windowed shards of instruction examples, and where a
// data file's ids lie (a text file's bytes are its ids).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/data/data_config.h"

namespace zerod {

// llm.c shard: 256 little-endian int32 header (magic, version, token count,
// rest zero), then `count` little-endian ids: uint16 (GPT-2's vocabulary),
// or uint32 under llm.c's own magic and version for vocabularies past 65536
// ids (Llama 3's 128,256). Shards of both kinds may make one dataset.
inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardVersion = 1;
inline constexpr int32_t kTokenShard32Magic = 20240801;
inline constexpr int32_t kTokenShard32Version = 7;
// zerod's windowed shard: instruction examples (zeroctl tokenize), each
// padded to one window of `window` ids, the seq_len they were laid out for,
// with their loss mask. The llm.c header with the id count in header[2] and
// the window in header[3], then uint32 ids, the top bit (kNotTarget) set on
// each id the loss does not count as a target. A window's first id is
// never a target, so windows neither share ids nor see another's.
inline constexpr int32_t kWindowShardMagic = 20261128;
inline constexpr int32_t kWindowShardVersion = 1;
inline constexpr uint32_t kNotTarget = 0x80000000u;
// A packed windowed shard (zeroctl tokenize --pack), version 2: each window
// a sequence of documents covering all its ids, bit 30 (kDocStart) set on
// each document's first id, so a window's first id always carries it, and
// the EOS padding after a window's last document is a document of its own.
// header[4] holds the count of flagged ids, the boundary table's size, so
// that a file whose flags were damaged is caught when it loads.
inline constexpr int32_t kPackedWindowShardVersion = 2;
inline constexpr uint32_t kDocStart = 0x40000000u;
// A shard of any kind, its ids widened (a windowed shard's with their flag).
absl::StatusOr<std::vector<uint32_t>> read_token_shard(const std::string& path);
// Written aside and renamed into place: uint16 ids, or uint32 ones.
absl::Status write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens);
absl::Status write_token_shard32(const std::string& path, const std::vector<uint32_t>& tokens);
// `ids` must be a whole number of windows; `packed` writes version 2 with
// the count of ids carrying kDocStart in header[4].
absl::Status write_window_shard(const std::string& path, const std::vector<uint32_t>& ids, int window,
                                bool packed = false);

// "data file '<path>'", how every message about a data file starts.
std::string data_file_name(const std::string& path);

// Where a data file's ids start, how many it holds, their width in bytes
// and, for a windowed shard, its window; for a packed one, the count of
// document starts its header declares.
struct FileTokens {
  int64_t offset, count;
  int width;
  int window = 0;
  bool packed = false;
  int64_t doc_starts = 0;
};

// The ids of a file of `kind` (text or tokens), its header checked against
// its size; errors name the file and what is wrong.
absl::StatusOr<FileTokens> file_tokens(DataKind kind, const std::string& path);

}  // namespace zerod
