// kw_runtime.cpp — the one host extension every kernelwright ModelNew shares.
//
// A model's kernels are built without any torch header (nvcc on the .cu alone, about a second): each
// kernel exports a C entry `kw_entry_NAME` and `kw_workspace_NAME`. Everything that needs ATen — checking
// the tensors a kernel is called with, making operands readable (views, contiguous or aligned copies),
// allocating outputs and scratch on the caching allocator, the current stream, parameter-derived caches —
// lives here, driven by a per-kernel spec (plain data). This file never changes between models, so it is
// compiled once per torch version and GPU architecture (about 15 s) and then loaded from the cache; a
// model's build no longer parses ATen and pybind11 headers.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/utils/pybind.h>

#include "kw_entry.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

// Errors are std::runtime_error (a Python RuntimeError) built by plain string concatenation. On the H100
// image (torch 2.11+cu130, g++ 13) any std::ostringstream in an extension's own code crashed the process,
// and with it c10::str and TORCH_CHECK's formatting.
void kw_append(std::string& s, const char* v) { s += v; }
void kw_append(std::string& s, const std::string& v) { s += v; }
void kw_append(std::string& s, at::ScalarType v) { s += c10::toString(v); }
void kw_append(std::string& s, const c10::Device& v) { s += v.str(); }
void kw_append(std::string& s, at::IntArrayRef v) {
  s += "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  s += "]";
}
template <typename T, typename = std::enable_if_t<std::is_integral<T>::value>>
void kw_append(std::string& s, T v) { s += std::to_string(v); }

template <typename... A>
std::string kw_str(const A&... parts) {
  std::string s;
  (kw_append(s, parts), ...);
  return s;
}

#define KW_CHECK(cond, ...) \
  do { if (!(cond)) throw std::runtime_error(kw_str(__VA_ARGS__)); } while (0)

using KwEntry = const char* (*)(const KwOperand*, void* const*, void*, const KwCached*, cudaStream_t);
using KwWorkspace = size_t (*)();

at::ScalarType dtype_of(const std::string& name) {
  static const std::pair<const char*, at::ScalarType> table[] = {
      {"float32", at::kFloat}, {"float64", at::kDouble}, {"float16", at::kHalf}, {"bfloat16", at::kBFloat16},
      {"int64", at::kLong},    {"int32", at::kInt},      {"int16", at::kShort},  {"int8", at::kChar},
      {"uint8", at::kByte},    {"bool", at::kBool}};
  for (const auto& entry : table)
    if (name == entry.first) return entry.second;
  throw std::runtime_error("kernelwright runtime: unknown dtype " + name);
}

// How an input becomes the operand a kernel reads: a chain of steps, each an op name and integers.
enum class Op { Slice, Select, Permute, Reshape, Expand, Contiguous, InnerContiguous, Matrix, Dense };

Op op_of(const std::string& name) {
  static const std::pair<const char*, Op> table[] = {
      {"slice", Op::Slice},     {"select", Op::Select},         {"permute", Op::Permute},
      {"reshape", Op::Reshape}, {"expand", Op::Expand},         {"contiguous", Op::Contiguous},
      {"inner_contiguous", Op::InnerContiguous}, {"matrix", Op::Matrix}, {"dense", Op::Dense}};
  for (const auto& entry : table)
    if (name == entry.first) return entry.second;
  throw std::runtime_error("kernelwright runtime: unknown operand step " + name);
}

struct Step {
  Op op;
  std::vector<int64_t> args;
};

struct CacheSpec {             // bytes of the kept buffer, fingerprint words, and what else tells splits apart
  int64_t bytes = 0, words = 0;
  std::vector<int64_t> key;
};

struct Operand {
  int64_t input;
  std::vector<Step> steps;
  CacheSpec cache;             // bytes == 0: none
};

bool aligned(const at::Tensor& t, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % static_cast<uintptr_t>(bytes) == 0;
}

// A [batch, rows, cols] matrix read with unit column stride and `align`-element accesses: its address, row
// stride and batch stride must all be multiples of `align` elements.
bool readable(const at::Tensor& v, int64_t align) {
  const int64_t batch = v.size(0), rows = v.size(1);
  return v.stride(2) == 1 && (rows == 1 || (v.stride(1) >= v.size(2) && v.stride(1) % align == 0)) &&
         (batch == 1 || v.stride(0) % align == 0) && aligned(v, align * static_cast<int64_t>(v.element_size()));
}

at::Tensor apply(const Step& s, at::Tensor t, const std::string& kernel, size_t index) {
  const auto& a = s.args;
  switch (s.op) {
    case Op::Slice: return t.slice(a[0], a[1], a[2], a[3]);
    case Op::Select: return t.select(a[0], a[1]);
    case Op::Permute: return t.permute(a);
    case Op::Reshape: return t.reshape(a);
    case Op::Expand: return t.expand(a);
    case Op::Contiguous: return t.contiguous();
    case Op::InnerContiguous: return t.stride(-1) == 1 ? t : t.contiguous();
    case Op::Matrix: {
      // Anything unreadable (a transposed view, an offset slice) is copied once into a fresh allocation,
      // which the caching allocator aligns to 512 bytes. Not `contiguous()`: an offset slice is
      // contiguous already and would come back as is, still misaligned.
      if (readable(t, a[0])) return t;
      at::Tensor copy = t.clone(at::MemoryFormat::Contiguous);
      KW_CHECK(readable(copy, a[0]), kernel, ": operand ", index, " ", t.sizes(), " cannot be read with ",
               a[0], "-element accesses");
      return copy;
    }
    case Op::Dense:    // dense, at an address aligned to a[0] bytes (vector loads); copied when not
      return t.is_contiguous() && aligned(t, a[0]) ? t : t.clone(at::MemoryFormat::Contiguous);
  }
  return t;
}

// A parameter's derived buffer (the 3xTF32 split of a weight), kept while the parameter lives, with a
// fingerprint word per tile of the values it was made from: every call's kernel reads the parameter and
// redoes the tiles whose fingerprint moved, so every write is seen (`param.data.copy_` and slice assignment
// included) with no host sync. Shared by all streams and all kernels that derive the same buffer.
struct CacheEntry {
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> source;
  const c10::TensorImpl* impl;
  std::vector<int64_t> key;    // device, bytes, words, the spec's key
  at::Tensor data, words;      // words: never initialized (a tile matches only after it was made)
  unsigned long long salt;     // this entry's own, mixed into its fingerprints
  cudaStream_t made_on;        // the stream the two tensors were allocated on
};

unsigned long long next_salt() {   // splitmix64: distinct, well-mixed salts from a counter
  static std::atomic<unsigned long long> counter{0};
  unsigned long long z = (counter.fetch_add(1) + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

KwCached cached_buffer(const at::Tensor& param, const CacheSpec& spec, const c10::cuda::CUDAStream& stream) {
  static std::mutex lock;
  static auto* entries = new std::vector<CacheEntry>();     // never destroyed: no CUDA frees at exit
  std::vector<int64_t> key = {param.get_device(), spec.bytes, spec.words};
  key.insert(key.end(), spec.key.begin(), spec.key.end());
  std::lock_guard<std::mutex> hold(lock);
  size_t found = SIZE_MAX;
  for (size_t i = 0; i < entries->size();) {
    CacheEntry& e = (*entries)[i];
    if (e.source.expired()) {          // the parameter is gone: drop its buffer
      entries->erase(entries->begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (e.impl == param.unsafeGetTensorImpl() && e.key == key) found = i;
    ++i;
  }
  if (found == SIZE_MAX) {
    using weak_impl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
    found = entries->size();
    const auto bytes = param.options().dtype(at::kByte);
    entries->push_back({weak_impl(param.getIntrusivePtr()), param.unsafeGetTensorImpl(), key,
                        at::empty({spec.bytes}, bytes), at::empty({spec.words}, param.options().dtype(at::kLong)),
                        next_salt(), stream.stream()});
  }
  CacheEntry& entry = (*entries)[found];
  if (entry.made_on != stream.stream()) {
    // Used here too: the allocator must not hand the memory out again (once the parameter is gone) before
    // this stream's work on it is done.
    c10::cuda::CUDACachingAllocator::recordStream(entry.data.storage().data_ptr(), stream);
    c10::cuda::CUDACachingAllocator::recordStream(entry.words.storage().data_ptr(), stream);
  }
  return {entry.data.data_ptr(), reinterpret_cast<unsigned long long*>(entry.words.data_ptr<int64_t>()),
          entry.salt};
}

using Shape = std::vector<int64_t>;

class Kernel {
 public:
  Kernel(std::string name, uintptr_t entry, uintptr_t workspace, const py::list& inputs,
         const py::list& operands, const py::list& outputs)
      : name_(std::move(name)), entry_(reinterpret_cast<KwEntry>(entry)),
        workspace_(reinterpret_cast<KwWorkspace>(workspace)) {
    KW_CHECK(entry != 0 && workspace != 0, name_, ": the kernel library lacks its entry points");
    for (const auto& item : inputs) {
      inputs_.push_back(typed(item));
      const auto label = item.cast<py::tuple>()[2].cast<std::string>();
      labels_.push_back(label.empty() ? "" : " (" + label + ")");
    }
    KW_CHECK(!inputs_.empty(), name_, ": a kernel takes at least one input (it runs on that input's device)");
    for (const auto& item : outputs) outputs_.push_back(typed(item));
    for (const auto& item : operands) {
      auto t = item.cast<py::tuple>();
      Operand operand{t[0].cast<int64_t>(), {}, {}};
      KW_CHECK(operand.input >= 0 && operand.input < static_cast<int64_t>(inputs_.size()), name_,
               ": operand of input ", operand.input);
      for (const auto& step : t[1].cast<py::tuple>()) {
        auto s = step.cast<py::tuple>();
        Step parsed{op_of(s[0].cast<std::string>()), {}};
        for (size_t i = 1; i < s.size(); ++i) parsed.args.push_back(s[i].cast<int64_t>());
        check_step(parsed, s[0].cast<std::string>());
        operand.steps.push_back(std::move(parsed));
      }
      if (!t[2].is_none()) {
        auto c = t[2].cast<py::tuple>();
        operand.cache.bytes = c[0].cast<int64_t>();
        operand.cache.words = c[1].cast<int64_t>();
        operand.cache.key = c[2].cast<std::vector<int64_t>>();
      }
      operands_.push_back(std::move(operand));
    }
  }

  std::vector<at::Tensor> operator()(const std::vector<at::Tensor>& inputs) const {
    KW_CHECK(inputs.size() == inputs_.size(), name_, ": expected ", inputs_.size(), " inputs, got ",
             inputs.size());
    // Every input as passed, before any is viewed or copied: a CUDA tensor of the planned dtype and shape,
    // all on one device (the kernel runs on input 0's). Strides are free: what the kernel cannot read is
    // made readable below.
    for (size_t k = 0; k < inputs.size(); ++k) {
      const at::Tensor& t = inputs[k];
      const std::string& label = labels_[k];
      KW_CHECK(t.defined() && t.is_cuda(), name_, ": input ", k, label, " must be a CUDA tensor");
      KW_CHECK(t.scalar_type() == inputs_[k].first, name_, ": input ", k, label, " must be ", inputs_[k].first,
               ", got ", t.scalar_type());
      KW_CHECK(t.sizes() == at::IntArrayRef(inputs_[k].second), name_, ": input ", k, label,
               " must have shape ", at::IntArrayRef(inputs_[k].second), ", got ", t.sizes());
      KW_CHECK(t.device() == inputs[0].device(), name_, ": input ", k, label, " is on ", t.device(),
               ", input 0 on ", inputs[0].device());
    }
    const at::Tensor& first = inputs[0];
    const c10::cuda::CUDAGuard guard(first.device());
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
    // Per-call scratch on the stack (a call's host cost is a few microseconds: no heap traffic here).
    c10::SmallVector<at::Tensor, 8> held;       // operands (views or copies) alive until the launch is queued
    c10::SmallVector<KwOperand, 8> views;
    c10::SmallVector<KwCached, 8> cached;
    for (size_t j = 0; j < operands_.size(); ++j) {
      const Operand& o = operands_[j];
      at::Tensor t = inputs[o.input];
      for (const Step& s : o.steps) t = apply(s, t, name_, j);
      held.push_back(std::move(t));
      cached.push_back(o.cache.bytes ? cached_buffer(inputs[o.input], o.cache, stream)
                                     : KwCached{nullptr, nullptr, 0});
    }
    for (const at::Tensor& t : held) views.push_back({t.data_ptr(), t.sizes().data(), t.strides().data(), t.dim()});
    std::vector<at::Tensor> outputs;
    outputs.reserve(outputs_.size());
    c10::SmallVector<void*, 8> pointers;
    for (const auto& [dtype, shape] : outputs_) {
      outputs.push_back(at::empty(shape, first.options().dtype(dtype)));
      pointers.push_back(outputs.back().data_ptr());
    }
    // Scratch of this call, on the current stream (launches on two streams never share it), sized on this
    // call's device (a stream-K GEMM's workspace depends on the GPU's SM count).
    const auto bytes = static_cast<int64_t>(workspace_());
    at::Tensor workspace;
    if (bytes) workspace = at::empty({bytes}, first.options().dtype(at::kByte));
    const char* error = entry_(views.data(), pointers.data(), bytes ? workspace.data_ptr() : nullptr,
                               cached.data(), stream.stream());
    KW_CHECK(error == nullptr, name_, ": ", error == nullptr ? "" : error);
    return outputs;
  }

  const std::string& name() const { return name_; }

 private:
  // A malformed spec (a hand-edited file) is an error here, not a wild access at the first call.
  void check_step(const Step& s, const std::string& op) const {
    const size_t n = s.args.size();
    const bool ok = s.op == Op::Slice ? n == 4 && s.args[3] > 0
                    : s.op == Op::Select ? n == 2
                    : s.op == Op::Contiguous || s.op == Op::InnerContiguous ? n == 0
                    : s.op == Op::Matrix || s.op == Op::Dense ? n == 1 && s.args[0] > 0
                    : true;     // permute, reshape, expand: any number of sizes
    KW_CHECK(ok, name_, ": malformed operand step ", op, " with ", n, " argument(s)");
  }

  static std::pair<at::ScalarType, Shape> typed(const py::handle& item) {
    auto t = item.cast<py::tuple>();
    return {dtype_of(t[0].cast<std::string>()), t[1].cast<Shape>()};
  }

  std::string name_;
  KwEntry entry_;
  KwWorkspace workspace_;
  std::vector<std::pair<at::ScalarType, Shape>> inputs_, outputs_;
  std::vector<std::string> labels_;          // " (role name)" of each input, for messages
  std::vector<Operand> operands_;
};

std::vector<at::Tensor> launch(const Kernel& kernel, const std::vector<at::Tensor>& inputs) {
  try {
    return kernel(inputs);
  } catch (const c10::Error& e) {          // what an ATen call raised, as a plain RuntimeError
    throw std::runtime_error(kernel.name() + ": " + e.what_without_backtrace());
  }
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "kernelwright's runtime: checks, operands, outputs and launches for kernels built without torch";
  py::class_<Kernel, std::shared_ptr<Kernel>>(m, "Kernel")
      .def(py::init<std::string, uintptr_t, uintptr_t, const py::list&, const py::list&, const py::list&>())
      .def_property_readonly("name", &Kernel::name);
  m.def("launch", &launch, "run one kernel: launch(kernel, [tensors]) -> [outputs]");
}
