// What every fuzz target shares: a scratch directory of its own, where the
// input becomes the files a reader opens, and a way to cut one input into
// several (a config and its overrides, a config.json and its weights).
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace zerod::fuzz {

// Made on first use under /dev/shm when there is one (files cost little
// there, and every input writes some), removed when the process exits.
inline const std::string& scratch_dir() {
  struct Scratch {
    std::string path;
    Scratch() {
      const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
      path = std::string(base) + "/zerod-fuzz-XXXXXX";
      if (!mkdtemp(path.data())) abort();
    }
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Scratch dir;
  return dir.path;
}

// Writes `bytes` to scratch_dir()/name (its directories made) and returns its path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::filesystem::path path = std::filesystem::path(scratch_dir()) / name;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) abort();
  return path.string();
}

// The input cut at its NUL bytes into at most `max_parts` parts; the last
// part keeps whatever NULs follow.
inline std::vector<std::string_view> split_at_nul(const uint8_t* data, size_t size, size_t max_parts) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t nul = rest.find('\0');
    if (nul == std::string_view::npos) break;
    parts.push_back(rest.substr(0, nul));
    rest.remove_prefix(nul + 1);
  }
  parts.push_back(rest);
  return parts;
}

}  // namespace zerod::fuzz
