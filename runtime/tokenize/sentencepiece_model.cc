#include "runtime/tokenize/sentencepiece_model.h"

#include <sentencepiece_processor.h>

namespace zerod {

struct SentencePieceModel::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

SentencePieceModel::SentencePieceModel() : impl_(std::make_unique<Impl>()) {}
SentencePieceModel::~SentencePieceModel() = default;

bool SentencePieceModel::load(const std::string& path, std::string* error) {
  const sentencepiece::util::Status s = impl_->sp.Load(path);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}

std::vector<int> SentencePieceModel::encode(std::string_view text) const {
  std::vector<int> ids;
  // Encoding fails only on a model that did not load, which load() reported.
  (void)impl_->sp.Encode(text, &ids);
  return ids;
}

int SentencePieceModel::size() const { return impl_->sp.GetPieceSize(); }

int SentencePieceModel::id_of(std::string_view piece) const {
  const int id = impl_->sp.PieceToId(piece);  // the unknown token's id for a stranger
  return id >= 0 && impl_->sp.IdToPiece(id) == piece ? id : -1;
}

int SentencePieceModel::bos_id() const { return impl_->sp.bos_id(); }
int SentencePieceModel::eos_id() const { return impl_->sp.eos_id(); }

}  // namespace zerod
