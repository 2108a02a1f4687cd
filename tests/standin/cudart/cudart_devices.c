/* A stand-in for the CUDA runtime's device functions, for tests without a GPU
 * (tests/workloads/cuda_allocator.py loads it, RTLD_GLOBAL, before the real
 * libcudart.so.12): c10's own SetDevice, GetDevice, current_device and
 * device_count_ensure_non_zero in Debian's real libc10_cuda.so then run as on a machine
 * with CUDA_STANDIN_DEVICES devices (default 2). As the runtime does, each thread has its
 * current device, 0 until it sets one. Nothing else of the runtime is replaced.
 *   cc -shared -fPIC -O2 -o libcudart_devices.so cudart_devices.c */
#include <stdlib.h>

enum { cudaSuccess = 0, cudaErrorInvalidDevice = 101 };

static __thread int current;

static int count(void)
{
	const char *n = getenv("CUDA_STANDIN_DEVICES");
	return n && *n ? atoi(n) : 2;
}

int cudaGetDeviceCount(int *n)
{
	*n = count();
	return cudaSuccess;
}

int cudaGetDevice(int *device)
{
	*device = current;
	return cudaSuccess;
}

int cudaSetDevice(int device)
{
	if (device < 0 || device >= count())
		return cudaErrorInvalidDevice;
	current = device;
	return cudaSuccess;
}
