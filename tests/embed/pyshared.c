/* A Python that is an embedder of Debian's shared libpython3.11 (the libpython3.11
 * package): the interpreter, slot_tp_call and _PyRuntime live in libpython3.11.so.1.0,
 * not in the executable, as in a program that embeds CPython. Built by the tests
 * (evmbpf_testlib.host_shared_target). */
#include <Python.h>

int main(int argc, char **argv)
{
	return Py_BytesMain(argc, argv);
}
