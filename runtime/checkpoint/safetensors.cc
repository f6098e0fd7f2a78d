#include "runtime/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/checkpoint/output_file.h"
#include "runtime/core/strict_json.h"

namespace zerod {
namespace {

constexpr uint64_t kMaxHeader = 100 << 20;  // a header past this is not a weights file

struct DtypeName {
  const char* name;
  DType dtype;
};
constexpr DtypeName kDtypes[] = {
    {"F32", DType::kF32}, {"BF16", DType::kBF16}, {"F16", DType::kF16}, {"I8", DType::kI8}, {"U8", DType::kU8}};

const char* safetensors_name(DType t) {
  for (const DtypeName& d : kDtypes) {
    if (d.dtype == t) return d.name;
  }
  return "?";
}

absl::Status bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// One header entry, checked against the data section's size.
absl::StatusOr<SafeTensor> parse_entry(const std::string& path, const std::string& name, const nlohmann::json& e,
                                       uint64_t data_size) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!e.is_object()) return bad(path, absl::StrCat(where, " is not an object"));
  SafeTensor t;
  t.name = name;
  const auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) return bad(path, absl::StrCat(where, " has no dtype"));
  const auto known = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                  [&](const DtypeName& d) { return *dt == d.name; });
  if (known == std::end(kDtypes)) {
    return bad(path, absl::StrCat(where, " has dtype ", dt->get<std::string>(), " (supported: F32 BF16 F16 I8 U8)"));
  }
  t.dtype = known->dtype;
  const auto shape = e.find("shape");
  if (shape == e.end() || !shape->is_array()) return bad(path, absl::StrCat(where, " has no shape"));
  uint64_t numel = 1;
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned()) return bad(path, absl::StrCat(where, " has a shape entry that is not a size"));
    const uint64_t n = d.get<uint64_t>();
    if (n != 0 && numel > data_size / n) return bad(path, absl::StrCat(where, " has a shape larger than the file"));
    numel *= n;
    t.shape.push_back(static_cast<int64_t>(n));
  }
  const auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return bad(path, absl::StrCat(where, " needs data_offsets [begin, end]"));
  }
  t.begin = (*off)[0].get<uint64_t>();
  t.end = (*off)[1].get<uint64_t>();
  if (t.begin > t.end || t.end > data_size) {
    return bad(path, absl::StrCat(where, " has data_offsets [", t.begin, ", ", t.end, "] outside the ", data_size,
                                  " data bytes"));
  }
  if (t.end - t.begin != static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype)) {
    return bad(path, absl::StrCat(where, " has ", t.end - t.begin, " bytes for ", t.numel(), " elements of ",
                                  known->name));
  }
  return t;
}

}  // namespace

int64_t SafeTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<SafetensorsReader> SafetensorsReader::open(const std::string& path, const IoFaultHook* faults) {
  SafetensorsReader r;
  r.path_ = path;
  r.faults_ = faults;
  const int flags = O_RDONLY | O_CLOEXEC;
  const int injected = faults && faults->on_open ? faults->on_open(path, flags) : 0;
  if (injected != 0) errno = injected;
  r.fd_ = injected == 0 ? ::open(path.c_str(), flags) : -1;
  if (r.fd_ < 0) return errno_error("cannot open", path);
  struct stat st;
  if (::fstat(r.fd_, &st) != 0) return errno_error("cannot stat", path);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t n = 0;
  unsigned char len[8];
  if (size < 8 || ::pread(r.fd_, len, 8, 0) != 8) return bad(path, "too short for a safetensors header");
  for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
  if (n > kMaxHeader || n > size - 8) {
    return bad(path, absl::StrCat("header length ", n, " does not fit the file's ", size, " bytes"));
  }
  std::string header(n, '\0');
  if (::pread(r.fd_, header.data(), n, 8) != static_cast<ssize_t>(n)) return errno_error("cannot read the header of", path);
  absl::StatusOr<nlohmann::json> parsed = parse_strict_json(header, absl::StrCat(path, ": the header"));
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& j = *parsed;
  if (!j.is_object()) return bad(path, "header is not a JSON object");
  r.data_start_ = 8 + n;
  const uint64_t data_size = size - r.data_start_;
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return bad(path, "__metadata__ is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) return bad(path, absl::StrCat("__metadata__ '", mk, "' is not a string"));
        r.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    ZEROD_ASSIGN_OR_RETURN(SafeTensor t, parse_entry(path, key, value, data_size));
    r.tensors_.push_back(std::move(t));
  }
  std::sort(r.tensors_.begin(), r.tensors_.end(), [](const SafeTensor& a, const SafeTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (const SafeTensor& t : r.tensors_) {
    if (t.begin != at) {
      return bad(path, absl::StrCat("tensor '", t.name, "' starts at byte ", t.begin, " of the data, expected ", at,
                                    t.begin < at ? " (it overlaps the one before)" : " (a gap)"));
    }
    at = t.end;
  }
  if (at != data_size) {
    return bad(path, absl::StrCat("the tensors cover ", at, " of the ", data_size, " data bytes"));
  }
  return r;
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      faults_(o.faults_),
      data_start_(o.data_start_),
      tensors_(std::move(o.tensors_)),
      metadata_(std::move(o.metadata_)) {}

SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    faults_ = o.faults_;
    data_start_ = o.data_start_;
    tensors_ = std::move(o.tensors_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

const SafeTensor* SafetensorsReader::find(const std::string& name) const {
  for (const SafeTensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::Status SafetensorsReader::read(const SafeTensor& t, uint64_t offset, uint64_t n, void* out) const {
  if (offset > t.end - t.begin || n > t.end - t.begin - offset) {
    return absl::OutOfRangeError(absl::StrCat(path_, ": bytes [", offset, ", ", offset + n, ") of tensor '", t.name,
                                              "' are past its ", t.end - t.begin));
  }
  auto* p = static_cast<char*>(out);
  for (uint64_t done = 0; done < n;) {
    const uint64_t at = data_start_ + t.begin + offset + done;
    ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(at));
    if (faults_ && faults_->on_complete) {
      r = faults_->on_complete(false, path_, at, static_cast<uint32_t>(std::min<uint64_t>(n - done, UINT32_MAX)),
                               r < 0 ? -errno : static_cast<int>(std::min<ssize_t>(r, INT32_MAX)));
      if (r < 0) errno = static_cast<int>(-r);
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno_error(absl::StrCat("cannot read tensor '", t.name, "' from"), path_);
    if (r == 0) {
      return absl::DataLossError(absl::StrCat(path_, " ends at byte ", at, ", inside tensor '", t.name, "'"));
    }
    done += static_cast<uint64_t>(r);
  }
  return absl::OkStatus();
}

absl::Status SafetensorsReader::read_f32(const SafeTensor& t, int64_t first, int64_t n, float* out) const {
  if (t.dtype == DType::kF32) return read(t, first * 4, n * 4, out);
  if (t.dtype != DType::kBF16 && t.dtype != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", t.name, "' is ", dtype_name(t.dtype), ", not a float type"));
  }
  // Through scratch of fixed size: a range can be a whole tensor.
  constexpr int64_t kPart = 16384;
  uint16_t raw[kPart];
  for (int64_t at = 0; at < n; at += kPart) {
    const int64_t m = std::min(kPart, n - at);
    ZEROD_RETURN_IF_ERROR(read(t, (first + at) * 2, m * 2, raw));
    convert_to_f32(t.dtype, raw, out + at, m);
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsLayout> layout_safetensors(std::vector<SafeTensor> tensors,
                                                     const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (SafeTensor& t : tensors) {
    if (t.name == "__metadata__" || header.contains(t.name)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor name '", t.name, "' used twice or reserved"));
    }
    t.begin = at;
    t.end = at += static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", safetensors_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  SafetensorsLayout f;
  f.head.resize(8);
  for (int i = 0; i < 8; ++i) f.head[i] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  f.head += text;
  f.tensors = std::move(tensors);
  return f;
}

absl::Status serialize_safetensors(const SafetensorsLayout& file, const TensorWriter& write, const ByteSink& out) {
  ZEROD_RETURN_IF_ERROR(out(file.head.data(), file.head.size()));
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    const SafeTensor& t = file.tensors[i];
    const uint64_t want = t.end - t.begin;
    uint64_t got = 0;
    ZEROD_RETURN_IF_ERROR(write(i, [&](const void* data, size_t n) {
      if (got + n > want) {
        return absl::InternalError(absl::StrCat("tensor '", t.name, "' came with more than ", want, " bytes"));
      }
      got += n;
      return out(data, n);
    }));
    if (got != want) {
      return absl::InternalError(absl::StrCat("tensor '", t.name, "' came with ", got, " bytes, not ", want));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> write_safetensors(const std::string& path, std::vector<SafeTensor> tensors,
                                           const std::map<std::string, std::string>& metadata,
                                           const TensorWriter& write, const IoFaultHook* faults) {
  absl::StatusOr<SafetensorsLayout> file = layout_safetensors(std::move(tensors), metadata);
  if (!file.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", file.status().message()));
  const std::string tmp = path + ".tmp";
  ZEROD_ASSIGN_OR_RETURN(OutputFile f, OutputFile::create(tmp, faults));
  absl::Status s = serialize_safetensors(*file, write, [&](const void* data, size_t n) { return f.append(data, n); });
  if (s.ok()) s = f.finish();
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = errno_error("cannot rename to", path);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  ZEROD_RETURN_IF_ERROR(fsync_dir(std::filesystem::absolute(path).parent_path().string()));
  return f.crc();
}

absl::StatusOr<bool> same_values(const SafetensorsReader& ra, const SafeTensor& a, const SafetensorsReader& rb,
                                 const SafeTensor& b) {
  constexpr int64_t kPart = 4096;
  float fa[kPart], fb[kPart];
  for (int64_t at = 0; at < a.numel(); at += kPart) {
    const int64_t n = std::min(kPart, a.numel() - at);
    ZEROD_RETURN_IF_ERROR(ra.read_f32(a, at, n, fa));
    ZEROD_RETURN_IF_ERROR(rb.read_f32(b, at, n, fb));
    if (!std::equal(fa, fa + n, fb)) return false;
  }
  return true;
}

}  // namespace zerod
