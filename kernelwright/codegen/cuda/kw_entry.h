// kw_entry.h — what a kernel's C entry receives: the one declaration shared by the kernels (kw_common.cuh
// includes it) and the runtime extension (kw_runtime.cpp), inlined into both when they are assembled.
//
// Every kernel exports two C functions, called by the shared runtime extension, which checks the tensors,
// prepares the operands, allocates outputs and scratch and picks the stream:
//   const char* kw_entry_NAME(const KwOperand* operands, void* const* outputs, void* workspace,
//                             const KwCached* cached, cudaStream_t stream);   // nullptr, or the error
//   size_t kw_workspace_NAME();                                               // scratch bytes per call
#pragma once
#include <stdint.h>

struct KwOperand {             // an operand as prepared by the runtime: a view of its tensor
  const void* data;
  const int64_t* sizes;
  const int64_t* strides;
  int64_t ndim;
};
struct KwCached {              // a parameter-derived buffer kept while the parameter lives (else all null)
  void* data;
  unsigned long long* words;   // per-tile fingerprints of the values `data` was made from
  unsigned long long salt;
};
