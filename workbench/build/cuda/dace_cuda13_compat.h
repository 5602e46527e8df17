#pragma once
// Names DaCe 1.0.2's CUDA runtime headers use that CUDA 13 (CCCL 3) removed.
// Force-included (-include) into every .cu file the workbench compiles.
#include <cstddef>
#include <cub/cub.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#ifndef CTA_SYNC
#define CTA_SYNC() __syncthreads()
#endif
namespace cub {
template <typename T>
using CountingInputIterator = thrust::counting_iterator<T>;
template <typename ValueType, typename ConversionOp, typename InputIteratorT,
          typename OffsetT = std::ptrdiff_t>
using TransformInputIterator = thrust::transform_iterator<ConversionOp, InputIteratorT, ValueType>;
}  // namespace cub
