/* evmbpf record's command line (record_cli.c). */
#ifndef EVMBPF_RECORD_CLI_H
#define EVMBPF_RECORD_CLI_H

/* argv[0] is "record"; evmbpf's exit status. */
int record_main(int argc, char **argv);

#endif
