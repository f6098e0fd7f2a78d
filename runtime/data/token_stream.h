// A dataset's token ids as one stream the loader reads windows from: files
// mapped read-only and read in place, or ids held in memory (the synthetic
// task). Mapped files are never copied whole into a rank: every rank on a
// node shares their pages through the page cache, which the kernel may
// drop and read again, so a glob of large shards costs no rank their sum.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "runtime/core/status.h"

namespace zerod {

class TokenStream {
 public:
  TokenStream();
  // Ids held in memory.
  explicit TokenStream(std::vector<uint16_t> ids);
  TokenStream(TokenStream&&) noexcept;
  TokenStream& operator=(TokenStream&&) noexcept;
  ~TokenStream();

  // Appends the `count` ids of `path` from byte `offset` on, each `width`
  // bytes (1: text, a byte an id; 2 or 4: little-endian uint16 or uint32,
  // as in llm.c shards); the caller has checked that the file holds them.
  absl::Status append_file(const std::string& path, int64_t offset, int64_t count, int width);

  int64_t size() const { return size_; }
  // Ids [pos, pos + n) into out; the range lies within the stream.
  void read(int64_t pos, int64_t n, uint32_t* out) const;
  // The first id at or past `from` that, without the bits `flags`, is >=
  // `limit`, or -1, read without keeping the pages it touched resident.
  int64_t find_at_least(int64_t from, uint32_t limit, uint32_t flags = 0) const;
  // Hands ids [from, to) to `visit(pos, ids, n)` a chunk at a time, in
  // order, until it returns false; as find_at_least, keeps no page resident.
  void scan(int64_t from, int64_t to, absl::FunctionRef<bool(int64_t, const uint32_t*, int64_t)> visit) const;

 private:
  struct Mapping;
  struct Piece {
    const unsigned char* bytes;
    int64_t first, count;  // ids [first, first + count) of the stream
    int width;
  };
  void read_piece(const Piece& p, int64_t from, int64_t n, uint32_t* out) const;

  std::vector<uint16_t> held_;
  std::vector<std::unique_ptr<Mapping>> mappings_;
  std::vector<Piece> pieces_;
  int64_t size_ = 0;
};

}  // namespace zerod
