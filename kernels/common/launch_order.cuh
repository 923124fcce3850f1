// launch_order.cuh — Hopper programmatic dependent launch (PDL), in inline PTX (sm_90).
//
// When the second of two kernels on a stream is launched with the attribute
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, its blocks may start before the first
// kernel has finished: once every block of the first has called dependents_may_launch() (or
// exited). The second must call wait_for_prerequisite_grid() before it reads anything the first
// wrote; that wait returns when the first grid has completed and its writes are visible.
// Launched the ordinary way, both are no-ops, so the kernels stay correct under any launcher.
// Built for an arch below sm_90 (no griddepcontrol) both compile to nothing: there the launches
// are ordinary, and the stream already orders the second kernel after the first.
#pragma once

__device__ __forceinline__ void dependents_may_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
