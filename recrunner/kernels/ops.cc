// recrunner's fused CPU training kernels, as Paddle custom operators (built on first use by
// recrunner/kernels/build.py, for the CPU it runs on).
//
// recrunner_dense: a dense layer's training step, out = act(x @ w + b), act = ReLU or none.
// Paddle 3.0 runs it as a GEMM, a broadcast add and a ReLU, and backward as their three grad
// kernels: the add's and the ReLU's passes cost as much as the GEMMs around them at batch
// 512 (docs/performance.md). Here the bias and the ReLU are one pass over the GEMM's output,
// and backward is one pass (the ReLU's mask and the bias's column sums) before the two
// GEMMs. The GEMMs are Paddle's own matmul, so they run as fast as anything in Paddle.
//
// recrunner_fields: a field model's inputs from its batch's distinct table rows. Given the
// rows [n, W] (W = dim, or dim + 1 with each id's first-order weight last) and each field's
// index into them [B, S], writes [B, S * dim + D]: every field's latent vector, then the
// dense features [B, D]; [B, 1]: the sum of the fields' first-order weights (zero when
// W = dim); and [B, S, dim]: the latent vectors alone (a factorization machine's input). Paddle 3.0 takes a gather, a split by two matmuls, a sum, reshapes and a concat
// for this, and their gradient nodes; backward here is one scatter-add into the rows.
//
// recrunner_distinct_rows (a C function, through ctypes): a batch's distinct ids in
// first-seen order (as Arrow's dictionary encoding gives them), each id's index into them,
// and their rows gathered from the table: one hash pass and one gather that asks for rows
// ahead, where Arrow's encoding and numpy's take were 0.6 and 0.3 ms a W&D step.
//
// recrunner_row_adam (a C function, called through ctypes on numpy arrays): the lazy Adam
// update of a table's touched rows, in place, with the arithmetic of
// recrunner/train/row_adam.py's numpy update in its order (bit-identical to it, and so to
// Paddle's lazy Adam: tests/test_row_adam.py), in one pass instead of a dozen.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

// What paddle/extension.h holds for an operator, without its PIR pass and pybind headers,
// which tripled the build's time (7.9 s of parsing against 3.4 s) for nothing used here.
#include "paddle/fluid/platform/init_phi.h"
#include "paddle/phi/api/all.h"
static paddle::InitPhi g_init_phi;  // as paddle/extension.h declares it

namespace {

void CheckFloat2D(const paddle::Tensor& t, const char* name) {
  PD_CHECK(t.dtype() == paddle::DataType::FLOAT32, name, " must be float32");
  PD_CHECK(t.shape().size() == 2, name, " must be 2-D");
}

}  // namespace

std::vector<paddle::Tensor> DenseForward(const paddle::Tensor& x, const paddle::Tensor& w,
                                         const paddle::Tensor& b, bool relu) {
  CheckFloat2D(x, "x");
  CheckFloat2D(w, "w");
  PD_CHECK(b.dtype() == paddle::DataType::FLOAT32 && b.numel() == w.shape()[1],
           "b must be float32 with one value per output column");
  paddle::Tensor out = paddle::experimental::matmul(x, w, false, false);
  const int64_t rows = out.shape()[0], n = out.shape()[1];
  float* __restrict o = out.data<float>();
  const float* __restrict bias = b.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict row = o + r * n;
    if (relu) {
      for (int64_t j = 0; j < n; ++j) row[j] = std::max(row[j] + bias[j], 0.0f);
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
    }
  }
  return {out};
}

// The ReLU's gradient passes where its output is positive (as Paddle's relu_grad).
std::vector<paddle::Tensor> DenseBackward(const paddle::Tensor& x, const paddle::Tensor& w,
                                          const paddle::Tensor& out,
                                          const paddle::Tensor& grad_out, bool relu) {
  const int64_t rows = grad_out.shape()[0], n = grad_out.shape()[1];
  paddle::Tensor grad_b = paddle::empty({n}, grad_out.dtype(), grad_out.place());
  float* __restrict sum = grad_b.data<float>();
  std::fill(sum, sum + n, 0.0f);
  const float* __restrict g = grad_out.data<float>();
  paddle::Tensor grad_z = grad_out;
  if (relu) {
    grad_z = paddle::empty(grad_out.shape(), grad_out.dtype(), grad_out.place());
    const float* __restrict y = out.data<float>();
    float* __restrict d = grad_z.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* __restrict gr = g + r * n;
      const float* __restrict yr = y + r * n;
      float* __restrict dr = d + r * n;
      for (int64_t j = 0; j < n; ++j) {
        const float v = yr[j] > 0.0f ? gr[j] : 0.0f;
        dr[j] = v;
        sum[j] += v;
      }
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const float* __restrict gr = g + r * n;
      for (int64_t j = 0; j < n; ++j) sum[j] += gr[j];
    }
  }
  paddle::Tensor grad_x = paddle::experimental::matmul(grad_z, w, false, true);
  paddle::Tensor grad_w = paddle::experimental::matmul(x, grad_z, true, false);
  return {grad_x, grad_w, grad_b};
}

std::vector<std::vector<int64_t>> DenseShape(const std::vector<int64_t>& x,
                                             const std::vector<int64_t>& w,
                                             const std::vector<int64_t>& b) {
  return {{x[0], w[1]}};
}

std::vector<paddle::DataType> DenseDtype(const paddle::DataType& x, const paddle::DataType& w,
                                         const paddle::DataType& b) {
  return {x};
}

PD_BUILD_OP(recrunner_dense)
    .Inputs({"X", "W", "B"})
    .Outputs({"Out"})
    .Attrs({"relu: bool"})
    .SetKernelFn(PD_KERNEL(DenseForward))
    .SetInferShapeFn(PD_INFER_SHAPE(DenseShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(DenseDtype));

PD_BUILD_GRAD_OP(recrunner_dense)
    .Inputs({"X", "W", "Out", paddle::Grad("Out")})
    .Outputs({paddle::Grad("X"), paddle::Grad("W"), paddle::Grad("B")})
    .Attrs({"relu: bool"})
    .SetKernelFn(PD_KERNEL(DenseBackward));

namespace {

template <typename Index>
void GatherFields(const float* __restrict rows, const Index* __restrict index,
                  const float* __restrict dense, int64_t batch, int64_t fields, int64_t width,
                  int64_t dim, int64_t num_dense, float* __restrict x, float* __restrict wide,
                  float* __restrict latent) {
  const int64_t stride = fields * dim + num_dense;
  for (int64_t b = 0; b < batch; ++b) {
    float* __restrict xb = x + b * stride;
    float sum = 0.0f;
    for (int64_t s = 0; s < fields; ++s) {
      const float* __restrict row = rows + static_cast<int64_t>(index[b * fields + s]) * width;
      std::copy(row, row + dim, xb + s * dim);
      std::copy(row, row + dim, latent + (b * fields + s) * dim);
      if (width > dim) sum += row[dim];
    }
    std::copy(dense + b * num_dense, dense + (b + 1) * num_dense, xb + fields * dim);
    wide[b] = sum;
  }
}

template <typename Index>
void ScatterFields(const Index* __restrict index, const float* __restrict grad_x,
                   const float* __restrict grad_wide, const float* __restrict grad_latent,
                   int64_t batch, int64_t fields,
                   int64_t width, int64_t dim, int64_t num_dense, float* __restrict grad_rows) {
  const int64_t stride = fields * dim + num_dense;
  for (int64_t b = 0; b < batch; ++b) {
    const float* __restrict gb = grad_x == nullptr ? nullptr : grad_x + b * stride;
    for (int64_t s = 0; s < fields; ++s) {
      float* __restrict row = grad_rows + static_cast<int64_t>(index[b * fields + s]) * width;
      const float* __restrict gl =
          grad_latent == nullptr ? nullptr : grad_latent + (b * fields + s) * dim;
      if (gb != nullptr && gl != nullptr) {
        // the two uses' sum first, as autograd adds them before the gather's gradient
        for (int64_t k = 0; k < dim; ++k) row[k] += gb[s * dim + k] + gl[k];
      } else if (gb != nullptr) {
        for (int64_t k = 0; k < dim; ++k) row[k] += gb[s * dim + k];
      } else if (gl != nullptr) {
        for (int64_t k = 0; k < dim; ++k) row[k] += gl[k];
      }
      if (grad_wide != nullptr && width > dim) row[dim] += grad_wide[b];
    }
  }
}

void CheckFields(const paddle::Tensor& rows, const paddle::Tensor& index,
                 const paddle::Tensor& dense, int dim) {
  CheckFloat2D(rows, "rows");
  CheckFloat2D(dense, "dense");
  PD_CHECK(index.shape().size() == 2 && index.shape()[0] == dense.shape()[0],
           "index must be [batch, fields] with dense's batch");
  PD_CHECK(index.dtype() == paddle::DataType::INT32 || index.dtype() == paddle::DataType::INT64,
           "index must be int32 or int64");
  PD_CHECK(dim >= 1 && (rows.shape()[1] == dim || rows.shape()[1] == dim + 1),
           "rows must be dim or dim + 1 wide");
}

}  // namespace

std::vector<paddle::Tensor> FieldsForward(const paddle::Tensor& rows, const paddle::Tensor& index,
                                          const paddle::Tensor& dense, int dim) {
  CheckFields(rows, index, dense, dim);
  const int64_t batch = index.shape()[0], fields = index.shape()[1];
  const int64_t width = rows.shape()[1], num_dense = dense.shape()[1];
  paddle::Tensor x = paddle::empty({batch, fields * dim + num_dense}, paddle::DataType::FLOAT32,
                                   rows.place());
  paddle::Tensor wide = paddle::empty({batch, 1}, paddle::DataType::FLOAT32, rows.place());
  paddle::Tensor latent = paddle::empty({batch, fields, dim}, paddle::DataType::FLOAT32,
                                        rows.place());
  if (index.dtype() == paddle::DataType::INT32) {
    GatherFields(rows.data<float>(), index.data<int32_t>(), dense.data<float>(), batch, fields,
                 width, dim, num_dense, x.data<float>(), wide.data<float>(),
                 latent.data<float>());
  } else {
    GatherFields(rows.data<float>(), index.data<int64_t>(), dense.data<float>(), batch, fields,
                 width, dim, num_dense, x.data<float>(), wide.data<float>(),
                 latent.data<float>());
  }
  return {x, wide, latent};
}

// Each row's gradient sums its uses in batch order, as Paddle's embedding gradient does.
std::vector<paddle::Tensor> FieldsBackward(const paddle::Tensor& rows, const paddle::Tensor& index,
                                           const paddle::Tensor& dense,
                                           const paddle::Tensor& grad_x,
                                           const paddle::Tensor& grad_wide,
                                           const paddle::Tensor& grad_latent, int dim) {
  const int64_t batch = index.shape()[0], fields = index.shape()[1];
  const int64_t width = rows.shape()[1], num_dense = dense.shape()[1];
  paddle::Tensor grad_rows = paddle::empty(rows.shape(), paddle::DataType::FLOAT32, rows.place());
  float* out = grad_rows.data<float>();
  std::fill(out, out + grad_rows.numel(), 0.0f);
  // No gradient reaches the first-order sum when the model does not use it.
  const float* wide = grad_wide.initialized() ? grad_wide.data<float>() : nullptr;
  const float* latent = grad_latent.initialized() ? grad_latent.data<float>() : nullptr;
  const float* deep = grad_x.initialized() ? grad_x.data<float>() : nullptr;
  if (index.dtype() == paddle::DataType::INT32) {
    ScatterFields(index.data<int32_t>(), deep, wide, latent, batch, fields,
                  width, dim, num_dense, out);
  } else {
    ScatterFields(index.data<int64_t>(), deep, wide, latent, batch, fields,
                  width, dim, num_dense, out);
  }
  return {grad_rows};
}

std::vector<std::vector<int64_t>> FieldsShape(const std::vector<int64_t>& rows,
                                              const std::vector<int64_t>& index,
                                              const std::vector<int64_t>& dense, int dim) {
  return {{index[0], index[1] * dim + dense[1]}, {index[0], 1}, {index[0], index[1], dim}};
}

std::vector<paddle::DataType> FieldsDtype(const paddle::DataType& rows,
                                          const paddle::DataType& index,
                                          const paddle::DataType& dense) {
  return {rows, rows, rows};
}

PD_BUILD_OP(recrunner_fields)
    .Inputs({"Rows", "Index", "Dense"})
    .Outputs({"X", "Wide", "Latent"})
    .Attrs({"dim: int"})
    .SetKernelFn(PD_KERNEL(FieldsForward))
    .SetInferShapeFn(PD_INFER_SHAPE(FieldsShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(FieldsDtype));

PD_BUILD_GRAD_OP(recrunner_fields)
    .Inputs({"Rows", "Index", "Dense", paddle::Grad("X"), paddle::Grad("Wide"),
             paddle::Grad("Latent")})
    .Outputs({paddle::Grad("Rows")})
    .Attrs({"dim: int"})
    .SetKernelFn(PD_KERNEL(FieldsBackward));

namespace {

void RowAdamRange(float* weight, float* moments, const int64_t* rows, int64_t begin,
                  int64_t end, int64_t width, const float* grad, const float* values,
                  float lr_t, float eps_t, float beta1, float beta2) {
  const float c1 = 1.0f - beta1, c2 = 1.0f - beta2;
  // The rows are scattered over tables of millions of rows: each is a cache (and TLB) miss.
  // Asking for the rows a few ahead keeps several misses in flight instead of one.
  constexpr int64_t kAhead = 8;
  for (int64_t i = begin; i < end; ++i) {
    if (i + kAhead < end) {
      const int64_t next = rows[i + kAhead];
      __builtin_prefetch(weight + next * width, 1);
      __builtin_prefetch(moments + next * 2 * width, 1);
      __builtin_prefetch(moments + next * 2 * width + width, 1);
    }
    float* __restrict w = weight + rows[i] * width;
    float* __restrict m = moments + rows[i] * 2 * width;  // [rows, 2, width]: m, then v
    float* __restrict v = m + width;
    const float* __restrict g = grad + i * width;
    const float* __restrict start = values + i * width;
    for (int64_t k = 0; k < width; ++k) {
      const float mk = m[k] * beta1 + c1 * g[k];
      const float vk = v[k] * beta2 + c2 * g[k] * g[k];
      m[k] = mk;
      v[k] = vk;
      w[k] = start[k] - lr_t * (mk / (std::sqrt(vk) + eps_t));
    }
  }
}

}  // namespace

// threads = 2: the second half of the rows on a second thread (rows are distinct: no two
// threads touch one row), so that twice as many cache misses are in flight.
extern "C" void recrunner_row_adam(float* weight, float* moments, const int64_t* rows,
                                   int64_t count, int64_t width, const float* grad,
                                   const float* values, float lr_t, float eps_t, float beta1,
                                   float beta2, int threads) {
  if (threads < 2 || count < 2048) {
    RowAdamRange(weight, moments, rows, 0, count, width, grad, values, lr_t, eps_t, beta1,
                 beta2);
    return;
  }
  const int64_t half = count / 2;
  std::thread second(RowAdamRange, weight, moments, rows, half, count, width, grad, values,
                     lr_t, eps_t, beta1, beta2);
  RowAdamRange(weight, moments, rows, 0, half, width, grad, values, lr_t, eps_t, beta1, beta2);
  second.join();
}

// Returns the number of distinct ids, or -1 when an id lies outside the table's `rows`.
extern "C" int64_t recrunner_distinct_rows(const int64_t* ids, int64_t count, const float* weight,
                                           int64_t rows, int64_t width, int32_t* index,
                                           int64_t* distinct, float* values) {
  int64_t capacity = 16;
  while (capacity < 2 * count) capacity *= 2;
  std::vector<int32_t> slots(capacity, -1);  // position in `distinct`, or -1
  int64_t found = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= rows) return -1;  // outside the table: nothing is gathered
    uint64_t h = static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ULL;
    int64_t slot = static_cast<int64_t>(h >> 32) & (capacity - 1);
    while (slots[slot] >= 0 && distinct[slots[slot]] != id) slot = (slot + 1) & (capacity - 1);
    if (slots[slot] < 0) {
      slots[slot] = static_cast<int32_t>(found);
      distinct[found++] = id;
    }
    index[i] = slots[slot];
  }
  constexpr int64_t kAhead = 8;
  for (int64_t d = 0; d < found; ++d) {
    if (d + kAhead < found) __builtin_prefetch(weight + distinct[d + kAhead] * width);
    std::copy(weight + distinct[d] * width, weight + (distinct[d] + 1) * width,
              values + d * width);
  }
  return found;
}
