/* The process the agent runs in for tests/test_cupti.py's channel test (no GPU): it maps
 * the tensors' storage files given as arguments and prints each one's address (the
 * "device pointers" of tests/cupti/fake_cuda.c), waits for "go" on stdin, loads the agent
 * (CUDA_INJECTION64_PATH) and calls InitializeInjection as the driver would, says
 * "ready", and lives until its stdin closes; then it exits (the agent's atexit runs). */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdint.h>
#include <unistd.h>

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
	char line[64];
	if (!fgets(line, sizeof(line), stdin) || strncmp(line, "go", 2))
		return 1;
	void *h = dlopen(getenv("CUDA_INJECTION64_PATH"), RTLD_NOW);
	int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
	printf("ready %d\n", init ? init() : -1);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
