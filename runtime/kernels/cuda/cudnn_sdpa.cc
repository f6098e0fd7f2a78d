#include "runtime/kernels/cuda/cudnn_sdpa.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/core/status.h"

namespace zerod::cuda {
namespace {

absl::Status cudnn_status(cudnnStatus_t s, const std::string& what) {
  if (s == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  char detail[512] = "";
  cudnnGetLastErrorString(detail, sizeof detail);
  return absl::FailedPreconditionError(
      absl::StrCat("cuDNN: ", what, ": ", cudnnGetErrorString(s), detail[0] ? absl::StrCat(" (", detail, ")") : ""));
}

// A backend descriptor, destroyed with its owner.
class Desc {
 public:
  static absl::StatusOr<Desc> make(cudnnBackendDescriptorType_t type) {
    Desc d;
    ZEROD_RETURN_IF_ERROR(cudnn_status(cudnnBackendCreateDescriptor(type, &d.d_), "creating a descriptor"));
    return d;
  }
  Desc() = default;
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }

  cudnnBackendDescriptor_t get() const { return d_; }
  template <class T>
  absl::Status set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values, int64_t n = 1) {
    return cudnn_status(cudnnBackendSetAttribute(d_, name, type, n, values), absl::StrCat("attribute ", int(name)));
  }
  absl::Status set(cudnnBackendAttributeName_t name, const Desc& d) {
    const cudnnBackendDescriptor_t raw = d.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw);
  }
  absl::Status finalize(const std::string& what) { return cudnn_status(cudnnBackendFinalize(d_), what); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

cudnnDataType_t data_type(SdpaType t) {
  switch (t) {
    case SdpaType::kBF16:
      return CUDNN_DATA_BFLOAT16;
    case SdpaType::kF16:
      return CUDNN_DATA_HALF;
    case SdpaType::kI32:
      return CUDNN_DATA_INT32;
    case SdpaType::kBool:
      return CUDNN_DATA_BOOLEAN;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

cudnnPointwiseMode_t pointwise_mode(SdpaMode m) {
  switch (m) {
    case SdpaMode::kMul:
      return CUDNN_POINTWISE_MUL;
    case SdpaMode::kSub:
      return CUDNN_POINTWISE_SUB;
    case SdpaMode::kDiv:
      return CUDNN_POINTWISE_DIV;
    case SdpaMode::kAdd:
      return CUDNN_POINTWISE_ADD;
    case SdpaMode::kExp:
      return CUDNN_POINTWISE_EXP;
    case SdpaMode::kLog:
      return CUDNN_POINTWISE_LOG;
    case SdpaMode::kGenIndex:
      return CUDNN_POINTWISE_GEN_INDEX;
    case SdpaMode::kCmpGe:
      return CUDNN_POINTWISE_CMP_GE;
    default:
      return CUDNN_POINTWISE_BINARY_SELECT;
  }
}

absl::StatusOr<Desc> tensor(const SdpaTensor& t) {
  ZEROD_ASSIGN_OR_RETURN(Desc d, Desc::make(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  const cudnnDataType_t type = data_type(t.type);
  const int64_t alignment = 16;
  const bool is_virtual = t.is_virtual, by_value = t.by_value;
  ZEROD_RETURN_IF_ERROR(d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &t.uid));
  ZEROD_RETURN_IF_ERROR(d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type));
  ZEROD_RETURN_IF_ERROR(d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment));
  ZEROD_RETURN_IF_ERROR(d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, t.dims.data(), 4));
  ZEROD_RETURN_IF_ERROR(d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, t.strides.data(), 4));
  ZEROD_RETURN_IF_ERROR(d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &is_virtual));
  ZEROD_RETURN_IF_ERROR(d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &by_value));
  ZEROD_RETURN_IF_ERROR(d.finalize(absl::StrCat("tensor ", t.uid)));
  return d;
}

// A graph's descriptors: the operations, and what they refer to.
struct Descriptors {
  std::map<int64_t, Desc> tensors;
  std::vector<Desc> parts;  // the matmul, pointwise and reduction descriptors of the operations
  std::vector<Desc> ops;
  Desc graph;
};

absl::StatusOr<Desc> operation(const SdpaOp& op, Descriptors& ds) {
  const auto t = [&](int64_t uid) -> const Desc& { return ds.tensors.at(uid); };
  const cudnnDataType_t compute = data_type(op.compute);
  switch (op.kind) {
    case SdpaOpKind::kMatmul: {
      ZEROD_ASSIGN_OR_RETURN(Desc mm, Desc::make(CUDNN_BACKEND_MATMUL_DESCRIPTOR));
      ZEROD_RETURN_IF_ERROR(mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute));
      ZEROD_RETURN_IF_ERROR(mm.finalize("a matmul descriptor"));
      ZEROD_ASSIGN_OR_RETURN(Desc o, Desc::make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR));
      ZEROD_RETURN_IF_ERROR(o.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, t(op.in[0])));
      ZEROD_RETURN_IF_ERROR(o.set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, t(op.in[1])));
      ZEROD_RETURN_IF_ERROR(o.set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, t(op.out)));
      ZEROD_RETURN_IF_ERROR(o.set(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm));
      ds.parts.push_back(std::move(mm));
      return o;
    }
    case SdpaOpKind::kPointwise: {
      ZEROD_ASSIGN_OR_RETURN(Desc pw, Desc::make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
      const cudnnPointwiseMode_t mode = pointwise_mode(op.mode);
      ZEROD_RETURN_IF_ERROR(pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode));
      ZEROD_RETURN_IF_ERROR(pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &compute));
      if (op.mode == SdpaMode::kGenIndex) {
        ZEROD_RETURN_IF_ERROR(pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, &op.axis));
      }
      ZEROD_RETURN_IF_ERROR(pw.finalize("a pointwise descriptor"));
      ZEROD_ASSIGN_OR_RETURN(Desc o, Desc::make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR));
      ZEROD_RETURN_IF_ERROR(o.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw));
      const cudnnBackendAttributeName_t ports[] = {CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                                                   CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                                                   CUDNN_ATTR_OPERATION_POINTWISE_TDESC};
      for (size_t i = 0; i < op.in.size(); ++i) ZEROD_RETURN_IF_ERROR(o.set(ports[i], t(op.in[i])));
      ZEROD_RETURN_IF_ERROR(o.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, t(op.out)));
      const float one = 1.0f;
      ZEROD_RETURN_IF_ERROR(o.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, &one));
      ZEROD_RETURN_IF_ERROR(o.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, &one));
      ds.parts.push_back(std::move(pw));
      return o;
    }
    case SdpaOpKind::kReduction: {
      ZEROD_ASSIGN_OR_RETURN(Desc r, Desc::make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR));
      const cudnnReduceTensorOp_t how = op.mode == SdpaMode::kMax ? CUDNN_REDUCE_TENSOR_MAX : CUDNN_REDUCE_TENSOR_ADD;
      ZEROD_RETURN_IF_ERROR(r.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute));
      ZEROD_RETURN_IF_ERROR(r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &how));
      ZEROD_RETURN_IF_ERROR(r.finalize("a reduction descriptor"));
      ZEROD_ASSIGN_OR_RETURN(Desc o, Desc::make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR));
      ZEROD_RETURN_IF_ERROR(o.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r));
      ZEROD_RETURN_IF_ERROR(o.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, t(op.in[0])));
      ZEROD_RETURN_IF_ERROR(o.set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, t(op.out)));
      ds.parts.push_back(std::move(r));
      return o;
    }
    case SdpaOpKind::kReshape: {
      ZEROD_ASSIGN_OR_RETURN(Desc o, Desc::make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR));
      ZEROD_RETURN_IF_ERROR(o.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, t(op.in[0])));
      ZEROD_RETURN_IF_ERROR(o.set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, t(op.out)));
      return o;
    }
  }
  return absl::InternalError("an attention graph operation of no known kind");
}

// Every descriptor of g, finalized, the operation graph too (from cuDNN
// 9.8 it needs no handle); `handle` (or null) is the graph's.
absl::StatusOr<Descriptors> descriptors(const SdpaGraph& g, cudnnHandle_t handle) {
  Descriptors ds;
  for (const SdpaTensor& t : g.tensors) {
    ZEROD_ASSIGN_OR_RETURN(ds.tensors[t.uid], tensor(t));
  }
  std::vector<cudnnBackendDescriptor_t> raw;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    ZEROD_ASSIGN_OR_RETURN(Desc o, operation(g.ops[i], ds));
    ZEROD_RETURN_IF_ERROR(o.finalize(absl::StrCat("operation ", i, " (producing tensor ", g.ops[i].out, ")")));
    raw.push_back(o.get());
    ds.ops.push_back(std::move(o));
  }
  ZEROD_ASSIGN_OR_RETURN(ds.graph, Desc::make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  ZEROD_RETURN_IF_ERROR(
      ds.graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, raw.data(), int64_t(raw.size())));
  if (handle) ZEROD_RETURN_IF_ERROR(ds.graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle));
  ZEROD_RETURN_IF_ERROR(ds.graph.finalize("the operation graph"));
  return ds;
}

// Whether the engine of config `cfg` gives the same bits every run.
absl::StatusOr<bool> deterministic(const Desc& cfg) {
  ZEROD_ASSIGN_OR_RETURN(Desc engine, Desc::make(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0;
  ZEROD_RETURN_IF_ERROR(cudnn_status(
      cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw),
      "an engine config's engine"));
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  ZEROD_RETURN_IF_ERROR(
      cudnn_status(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                            CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes),
                   "an engine's numerical notes"));
  for (int64_t i = 0; i < n; ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return false;
  }
  return true;
}

std::string shape_name(const SdpaShape& s, bool backward) {
  return absl::StrCat("attention ", backward ? "backward" : "forward", " [B ", s.B, ", T ", s.T, ", ", s.NH,
                      " heads of ", s.hs(), s.KV < s.NH ? absl::StrCat(" over ", s.KV) : "", ", ",
                      s.io == SdpaType::kBF16 ? "bf16" : "fp16", s.packed ? ", packed" : "", "]");
}

}  // namespace

absl::Status sdpa_check_descriptors(const SdpaGraph& g) { return descriptors(g, nullptr).status(); }

struct CudnnSdpa::Plan {
  Descriptors ds;
  Desc config, plan;  // the engine config kept beside the plan made from it
  int64_t workspace = 0;
};

absl::StatusOr<std::unique_ptr<CudnnSdpa>> CudnnSdpa::create() {
  std::unique_ptr<CudnnSdpa> c(new CudnnSdpa);
  ZEROD_RETURN_IF_ERROR(cudnn_status(cudnnCreate(&c->handle_), "cudnnCreate"));
  return c;
}

CudnnSdpa::~CudnnSdpa() {
  plans_.clear();  // their descriptors before the handle
  if (handle_) cudnnDestroy(handle_);
}

absl::StatusOr<int64_t> CudnnSdpa::plan(const SdpaShape& s, bool backward, int64_t room) {
  const Key key = CudnnSdpa::key(s, backward);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second->workspace;
  if (auto it = refused_.find(key); it != refused_.end()) return it->second;
  auto plan = std::make_unique<Plan>();
  absl::Status why = [&]() -> absl::Status {
    ZEROD_ASSIGN_OR_RETURN(plan->ds, descriptors(backward ? sdpa_backward_graph(s) : sdpa_forward_graph(s), handle_));
    absl::Status last = absl::NotFoundError("cuDNN's heuristics offer no engine");
    for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      ZEROD_ASSIGN_OR_RETURN(Desc heur, Desc::make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
      ZEROD_RETURN_IF_ERROR(heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, plan->ds.graph));
      ZEROD_RETURN_IF_ERROR(heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode));
      if (absl::Status f = heur.finalize("the engine heuristics"); !f.ok()) {
        last = f;
        continue;
      }
      int64_t count = 0;
      ZEROD_RETURN_IF_ERROR(cudnn_status(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
                                         "the heuristics' results"));
      std::vector<Desc> configs;
      std::vector<cudnnBackendDescriptor_t> raw;
      for (int64_t i = 0; i < count; ++i) {
        ZEROD_ASSIGN_OR_RETURN(configs.emplace_back(), Desc::make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
        raw.push_back(configs.back().get());
      }
      ZEROD_RETURN_IF_ERROR(
          cudnn_status(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, raw.data()),
                       "the heuristics' results"));
      for (int64_t i = 0; i < count; ++i) {
        // An engine whose notes cannot be read is passed over like one that
        // says it varies.
        const absl::StatusOr<bool> same_bits = deterministic(configs[i]);
        if (!same_bits.ok() || !*same_bits) {
          last =
              same_bits.ok() ? absl::NotFoundError("cuDNN's engines for it are not deterministic") : same_bits.status();
          continue;
        }
        ZEROD_ASSIGN_OR_RETURN(Desc p, Desc::make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
        absl::Status f = p.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle_);
        f.Update(p.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i]));
        if (f.ok()) f = p.finalize("an execution plan");
        if (!f.ok()) {
          last = f;
          continue;
        }
        int64_t n = 0;
        ZEROD_RETURN_IF_ERROR(cudnn_status(cudnnBackendGetAttribute(p.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                                    CUDNN_TYPE_INT64, 1, &n, &plan->workspace),
                                           "a plan's workspace"));
        // Engines that keep the whole score matrix ask for more than
        // attention's scratch; a flash engine further down may not.
        if (plan->workspace > room) {
          last = absl::ResourceExhaustedError(absl::StrCat("its workspace (", plan->workspace,
                                                           " bytes) is past what attention's scratch leaves it (", room,
                                                           " bytes)"));
          continue;
        }
        plan->config = std::move(configs[i]);
        plan->plan = std::move(p);
        return absl::OkStatus();
      }
    }
    return last;
  }();
  if (!why.ok()) {
    refused_[key] = why;
    return why;
  }
  const int64_t workspace = plan->workspace;
  plans_[key] = std::move(plan);
  return workspace;
}

absl::StatusOr<SdpaSplit> CudnnSdpa::split(const SdpaShape& s, bool backward,
                                           const std::function<int64_t(int, int)>& room) {
  if (auto it = splits_.find(key(s, backward)); it != splits_.end()) return it->second;
  absl::Status whole;  // why all of s at once does not run
  const SdpaSplit parts = sdpa_split(s.B, s.NH, s.group(), [&](int n, int m) {
    SdpaShape part = s;
    part.B = n;
    part.heads = m == s.NH ? 0 : m;
    const absl::Status st = plan(part, backward, room(n, m)).status();
    if (n == s.B && m == s.NH) whole = st;
    return st.ok();
  });
  if (parts.sequences == 0) {
    refuse(s, backward, whole);
    return whole;
  }
  if (parts.sequences < s.B || parts.heads < s.NH) {
    std::fprintf(stderr, "zerod: %s runs fused %d sequence%s of %d heads a call: all at once, %s\n",
                 shape_name(s, backward).c_str(), parts.sequences, parts.sequences == 1 ? "" : "s", parts.heads,
                 whole.ToString().c_str());
  }
  splits_[key(s, backward)] = parts;
  return parts;
}

void CudnnSdpa::refuse(const SdpaShape& s, bool backward, absl::Status why) {
  std::fprintf(stderr, "zerod: %s runs unfused: %s\n", shape_name(s, backward).c_str(), why.ToString().c_str());
  splits_[key(s, backward)] = std::move(why);
}

absl::Status CudnnSdpa::run(const SdpaShape& s, bool backward, cudaStream_t stream,
                            const std::vector<std::pair<int64_t, void*>>& buffers, void* workspace) {
  const auto it = plans_.find(key(s, backward));
  if (it == plans_.end()) return absl::FailedPreconditionError(shape_name(s, backward) + " has no plan");
  ZEROD_RETURN_IF_ERROR(cudnn_status(cudnnSetStream(handle_, stream), "cudnnSetStream"));
  // The scalars by value: read when the work is enqueued.
  float scale = 1.0f / std::sqrt(static_cast<float>(s.hs())), one = 1.0f;
  float neg_inf = s.packed ? std::numeric_limits<float>::lowest() : -INFINITY;
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  for (const auto& [uid, p] : buffers) {
    uids.push_back(uid);
    pointers.push_back(p);
  }
  uids.insert(uids.end(), {kSdpaScale, kSdpaNegInf});
  pointers.insert(pointers.end(), {&scale, &neg_inf});
  if (backward) {
    uids.push_back(kSdpaOne);
    pointers.push_back(&one);
  }
  ZEROD_ASSIGN_OR_RETURN(Desc pack, Desc::make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
  ZEROD_RETURN_IF_ERROR(
      pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), int64_t(uids.size())));
  ZEROD_RETURN_IF_ERROR(
      pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers.data(), int64_t(pointers.size())));
  ZEROD_RETURN_IF_ERROR(pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace));
  ZEROD_RETURN_IF_ERROR(pack.finalize("the variant pack"));
  return cudnn_status(cudnnBackendExecute(handle_, it->second->plan.get(), pack.get()), shape_name(s, backward));
}

}  // namespace zerod::cuda
