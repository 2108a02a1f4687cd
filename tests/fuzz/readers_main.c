/* The readers alone, for a sanitizer build: evmbpf-readers summarize|show|forwards. */
#include "readers.h"

int main(int argc, char **argv)
{
	return readers_main(argc - 1, argv + 1);
}
