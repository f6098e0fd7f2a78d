#include "runtime/data/token_shard.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/data/token_stream.h"

namespace zerod {
namespace {

constexpr int64_t kHeaderInts = 256;
constexpr int64_t kHeaderBytes = kHeaderInts * 4;

using FilePtr = std::unique_ptr<FILE, int (*)(FILE*)>;

int32_t load_le32(const unsigned char* p) {
  return static_cast<int32_t>(uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24);
}

void store_le32(int32_t v, unsigned char* p) {
  const auto u = static_cast<uint32_t>(v);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(u >> (8 * i));
}

// The ids an llm.c shard's header describes, checked against the file's
// `size`; `head` holds the file's first min(size, kHeaderBytes) bytes.
absl::StatusOr<FileTokens> shard_tokens(const std::string& path, const unsigned char* head, int64_t size) {
  const std::string where = data_file_name(path);
  if (size < kHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": only ", size, " bytes, shorter than the ", kHeaderBytes, "-byte llm.c shard header"));
  }
  const int32_t magic = load_le32(head), version = load_le32(head + 4), count = load_le32(head + 8);
  if (magic != kTokenShardMagic && magic != kTokenShard32Magic && magic != kWindowShardMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": bad magic ", magic, " (expected ", kTokenShardMagic, " or ", kTokenShard32Magic,
        ", an llm.c token shard of 16- or 32-bit ids, or ", kWindowShardMagic, ", zerod's windowed shard)"));
  }
  const bool windowed = magic == kWindowShardMagic;
  const bool wide = magic == kTokenShard32Magic || windowed;
  const bool packed = windowed && version == kPackedWindowShardVersion;
  const int32_t want = windowed ? kWindowShardVersion : wide ? kTokenShard32Version : kTokenShardVersion;
  if (version != want && !packed) {
    const std::string expected = windowed ? absl::StrCat(want, " or ", kPackedWindowShardVersion) : absl::StrCat(want);
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": unsupported version ", version, " (expected ", expected, " for magic ", magic, ")"));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": negative token count ", count, " in the header"));
  }
  const int width = wide ? 4 : 2;
  const int32_t window = windowed ? load_le32(head + 12) : 0;
  if (windowed && (window < 1 || count % window != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the header's window ", window, " is not a positive divisor of its token count ", count));
  }
  const int32_t doc_starts = packed ? load_le32(head + 16) : 0;
  if (doc_starts < 0 || doc_starts > count) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": the header's count of document starts ", doc_starts,
                                                   " is not between 0 and its token count ", count));
  }
  const int64_t expected = kHeaderBytes + width * int64_t{count};
  if (size != expected) {
    const char* problem = size < expected ? "truncated" : "has trailing bytes";
    return absl::InvalidArgumentError(absl::StrCat(where, " ", problem, ": header says ", count, " tokens of ", width,
                                                   " bytes, so ", expected, " bytes expected, but the file has ",
                                                   size));
  }
  return FileTokens{kHeaderBytes, count, width, window, packed, doc_starts};
}

// The first min(size, kHeaderBytes) bytes of a file and its size.
absl::StatusOr<std::pair<std::string, int64_t>> read_head(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return absl::ErrnoToStatus(errno, absl::StrCat(data_file_name(path), " cannot be opened"));
  std::string head(kHeaderBytes, '\0');
  head.resize(std::fread(head.data(), 1, head.size(), f.get()));
  if (std::ferror(f.get()) || std::fseek(f.get(), 0, SEEK_END) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(data_file_name(path), " cannot be read"));
  }
  return std::pair{std::move(head), static_cast<int64_t>(std::ftell(f.get()))};
}

// A shard of `magic` and `version` holding `tokens`, each sizeof(T) bytes.
template <typename T>
absl::Status write_shard(const std::string& path, const std::vector<T>& tokens, int32_t magic, int32_t version,
                         int32_t window = 0, int32_t doc_starts = 0) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(data_file_name(path), ": ", tokens.size(), " tokens do not fit an llm.c shard's int32 count"));
  }
  constexpr size_t width = sizeof(T);
  std::string data(kHeaderBytes + width * tokens.size(), '\0');
  auto* bytes = reinterpret_cast<unsigned char*>(data.data());
  store_le32(magic, bytes);
  store_le32(version, bytes + 4);
  store_le32(static_cast<int32_t>(tokens.size()), bytes + 8);
  store_le32(window, bytes + 12);
  store_le32(doc_starts, bytes + 16);
  unsigned char* p = bytes + kHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (size_t b = 0; b < width; ++b) p[width * i + b] = static_cast<unsigned char>(tokens[i] >> (8 * b));
  }

  // Written aside and renamed into place, so `path` is never left half-written.
  const std::string tmp = path + ".tmp";
  FilePtr f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!f) return absl::ErrnoToStatus(errno, absl::StrCat(data_file_name(tmp), " cannot be created"));
  errno = 0;
  const bool wrote = std::fwrite(data.data(), 1, data.size(), f.get()) == data.size();
  const bool closed = std::fclose(f.release()) == 0;  // flushes, so may fail too (disk full)
  const int err = errno != 0 ? errno : EIO;
  std::error_code ignored;
  if (!wrote || !closed) {
    std::filesystem::remove(tmp, ignored);
    return absl::ErrnoToStatus(err, absl::StrCat(data_file_name(tmp), " could not be written"));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ignored);
    return absl::ErrnoToStatus(ec.value(), absl::StrCat("renaming '", tmp, "' to '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string data_file_name(const std::string& path) { return absl::StrCat("data file '", path, "'"); }

absl::StatusOr<FileTokens> file_tokens(DataKind kind, const std::string& path) {
  ZEROD_ASSIGN_OR_RETURN(const auto head, read_head(path));
  const auto& [bytes, size] = head;
  if (kind == DataKind::kText) {
    if (size == 0) return absl::InvalidArgumentError(absl::StrCat(data_file_name(path), " is empty"));
    return FileTokens{0, size, 1};
  }
  return shard_tokens(path, reinterpret_cast<const unsigned char*>(bytes.data()), size);
}

absl::StatusOr<std::vector<uint32_t>> read_token_shard(const std::string& path) {
  ZEROD_ASSIGN_OR_RETURN(const FileTokens f, file_tokens(DataKind::kTokens, path));
  std::vector<uint32_t> tokens(f.count);
  if (f.count == 0) return tokens;
  TokenStream ids;
  ZEROD_RETURN_IF_ERROR(ids.append_file(path, f.offset, f.count, f.width));
  ids.read(0, f.count, tokens.data());
  return tokens;
}

absl::Status write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  return write_shard(path, tokens, kTokenShardMagic, kTokenShardVersion);
}

absl::Status write_token_shard32(const std::string& path, const std::vector<uint32_t>& tokens) {
  return write_shard(path, tokens, kTokenShard32Magic, kTokenShard32Version);
}

absl::Status write_window_shard(const std::string& path, const std::vector<uint32_t>& ids, int window, bool packed) {
  if (window < 1 || ids.size() % window != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(data_file_name(path), ": ", ids.size(), " ids are not a whole number of windows of ", window));
  }
  if (!packed) return write_shard(path, ids, kWindowShardMagic, kWindowShardVersion, window);
  // Fits: write_shard refuses more than int32's ids.
  const auto doc_starts =
      static_cast<int32_t>(std::count_if(ids.begin(), ids.end(), [](uint32_t id) { return (id & kDocStart) != 0; }));
  return write_shard(path, ids, kWindowShardMagic, kPackedWindowShardVersion, window, doc_starts);
}

}  // namespace zerod
