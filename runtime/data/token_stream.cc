#include "runtime/data/token_stream.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"

namespace zerod {

// A whole file mapped read-only.
struct TokenStream::Mapping {
  void* addr = nullptr;
  size_t length = 0;
  ~Mapping() {
    if (addr) ::munmap(addr, length);
  }
};

TokenStream::TokenStream(std::vector<uint16_t> ids) : held_(std::move(ids)) {
  size_ = static_cast<int64_t>(held_.size());
  if (size_ > 0) pieces_.push_back({reinterpret_cast<const unsigned char*>(held_.data()), 0, size_, 0});
}

TokenStream::TokenStream() = default;
TokenStream::TokenStream(TokenStream&&) noexcept = default;
TokenStream& TokenStream::operator=(TokenStream&&) noexcept = default;
TokenStream::~TokenStream() = default;

absl::Status TokenStream::append_file(const std::string& path, int64_t offset, int64_t count, int width) {
  if (count == 0) return absl::OkStatus();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("data file '", path, "' cannot be opened"));
  struct stat st;
  void* addr = MAP_FAILED;
  int err = 0;
  if (::fstat(fd, &st) != 0) {
    err = errno;
  } else {
    addr = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) err = errno;
  }
  ::close(fd);  // the mapping keeps the file
  if (addr == MAP_FAILED) return absl::ErrnoToStatus(err, absl::StrCat("data file '", path, "' cannot be mapped"));
  auto m = std::make_unique<Mapping>();
  m->addr = addr;
  m->length = static_cast<size_t>(st.st_size);
  // The loader reads windows scattered over the file.
  ::madvise(addr, m->length, MADV_RANDOM);
  pieces_.push_back({static_cast<const unsigned char*>(addr) + offset, size_, count, width});
  mappings_.push_back(std::move(m));
  size_ += count;
  return absl::OkStatus();
}

void TokenStream::read_piece(const Piece& p, int64_t from, int64_t n, uint32_t* out) const {
  if (p.width == 0) {  // held ids
    std::copy_n(held_.data() + from, n, out);
  } else if (p.width == 1) {
    std::copy_n(p.bytes + from, n, out);
  } else if (p.width == 2) {
    const unsigned char* b = p.bytes + 2 * from;
    for (int64_t i = 0; i < n; ++i) out[i] = uint32_t{b[2 * i]} | uint32_t{b[2 * i + 1]} << 8;
  } else {
    const unsigned char* b = p.bytes + 4 * from;
    for (int64_t i = 0; i < n; ++i) {
      out[i] = uint32_t{b[4 * i]} | uint32_t{b[4 * i + 1]} << 8 | uint32_t{b[4 * i + 2]} << 16 |
               uint32_t{b[4 * i + 3]} << 24;
    }
  }
}

void TokenStream::read(int64_t pos, int64_t n, uint32_t* out) const {
  // The piece holding `pos`: the last one starting at or before it.
  auto it = std::ranges::upper_bound(pieces_, pos, {}, &Piece::first) - 1;
  while (n > 0) {
    const int64_t from = pos - it->first, take = std::min(n, it->count - from);
    read_piece(*it, from, take, out);
    pos += take;
    out += take;
    n -= take;
    ++it;
  }
}

int64_t TokenStream::find_at_least(int64_t from, uint32_t limit, uint32_t flags) const {
  int64_t found = -1;
  scan(from, size_, [&](int64_t pos, const uint32_t* ids, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      if ((ids[i] & ~flags) >= limit) {
        found = pos + i;
        return false;
      }
    }
    return true;
  });
  return found;
}

void TokenStream::scan(int64_t from, int64_t to,
                       absl::FunctionRef<bool(int64_t, const uint32_t*, int64_t)> visit) const {
  constexpr int64_t kChunk = 16384;  // ids a pass reads before it lets their pages go
  uint32_t ids[kChunk];
  const long page = ::sysconf(_SC_PAGESIZE);
  for (int64_t pos = from; pos < to; pos += kChunk) {
    const int64_t n = std::min(kChunk, to - pos);
    read(pos, n, ids);
    if (!visit(pos, ids, n)) return;
    // Mapped pages this pass touched need not stay in this rank's memory.
    for (const Piece& p : pieces_) {
      if (p.width == 0 || p.first >= pos + n || p.first + p.count <= pos) continue;
      const int64_t a = std::max(pos, p.first) - p.first, b = std::min(pos + n, p.first + p.count) - p.first;
      const auto begin = reinterpret_cast<uintptr_t>(p.bytes + a * p.width) & ~static_cast<uintptr_t>(page - 1);
      const auto end = reinterpret_cast<uintptr_t>(p.bytes + b * p.width);
      ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    }
  }
}

}  // namespace zerod
