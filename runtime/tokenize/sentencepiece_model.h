// libsentencepiece behind an interface free of abseil: its header declares
// absl::string_view as std::string_view, which Debian's abseil (with a
// string_view of its own) cannot share a translation unit with.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zerod {

class SentencePieceModel {
 public:
  SentencePieceModel();
  ~SentencePieceModel();
  // False, with sentencepiece's message in *error, when `path` is no model.
  bool load(const std::string& path, std::string* error);
  std::vector<int> encode(std::string_view text) const;
  int size() const;
  // -1 when the vocabulary has no piece `piece` (not its unknown token).
  int id_of(std::string_view piece) const;
  int bos_id() const;
  int eos_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zerod
