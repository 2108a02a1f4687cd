/* The process the agent runs in for tests/test_cupti.py's channel tests (no GPU): it maps
 * the tensors' storage files given as arguments and prints each one's address (the
 * "device pointers" of tests/cupti/fake_cuda.c), waits for "go" on stdin, loads the agent
 * (CUDA_INJECTION64_PATH) and calls InitializeInjection as the driver would, says
 * "ready", and lives until its stdin closes; then it exits (the agent's atexit runs).
 * AGENT_HOST_PRELOAD=LIB[:LIB...]: libraries mapped before the agent is loaded (a
 * libcupti or a libcudart the job would have loaded already). AGENT_HOST_WORK=N: once the
 * agent runs, the stand-in libcupti's fake_cupti_work(N) (GPU work seen by CUPTI). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdint.h>
#include <unistd.h>

/* every loaded object's fake_cupti_work (only the one the agent subscribed to acts) */
static int work(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	if (!info->dlpi_name || !*info->dlpi_name)
		return 0;
	void *h = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
	void (*f)(int) = h ? (void (*)(int))dlsym(h, "fake_cupti_work") : NULL;
	if (f)
		f(*(int *)arg);
	if (h)
		dlclose(h);
	return 0;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		int fd = open(argv[i], O_RDONLY);
		struct stat st;
		if (fd < 0 || fstat(fd, &st))
			return 1;
		void *m = mmap(NULL, st.st_size ? st.st_size : 1, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m == MAP_FAILED)
			return 1;
		printf("%llu\n", (unsigned long long)(uintptr_t)m);
	}
	fflush(stdout);
	const char *pre = getenv("AGENT_HOST_PRELOAD");
	if (pre && *pre) {
		char list[4096];
		snprintf(list, sizeof(list), "%s", pre);
		for (char *save, *lib = strtok_r(list, ":", &save); lib; lib = strtok_r(NULL, ":", &save))
			if (!dlopen(lib, RTLD_NOW | RTLD_LOCAL)) {
				fprintf(stderr, "agent_host: %s\n", dlerror());
				return 1;
			}
	}
	char line[64];
	if (!fgets(line, sizeof(line), stdin) || strncmp(line, "go", 2))
		return 1;
	void *h = dlopen(getenv("CUDA_INJECTION64_PATH"), RTLD_NOW);
	int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
	int rc = init ? init() : -1;
	const char *n = getenv("AGENT_HOST_WORK");
	if (n && *n) {
		int k = atoi(n);
		dl_iterate_phdr(work, &k);
	}
	printf("ready %d\n", rc);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
