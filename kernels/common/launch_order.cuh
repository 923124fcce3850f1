// launch_order.cuh — Hopper programmatic dependent launch (PDL), in inline PTX (sm_90).
//
// When the second of two kernels on a stream is launched with the attribute
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, its blocks may start before the first
// kernel has finished: once every block of the first has called dependents_may_launch() (or
// exited). The second must call wait_for_prerequisite_grid() before it reads anything the first
// wrote; that wait returns when the first grid has completed and its writes are visible.
// Launched the ordinary way, both are no-ops, so the kernels stay correct under any launcher.
#pragma once

__device__ __forceinline__ void dependents_may_launch() { asm volatile("griddepcontrol.launch_dependents;"); }

__device__ __forceinline__ void wait_for_prerequisite_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
