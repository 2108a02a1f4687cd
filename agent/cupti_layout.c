/* `make agent` compiles this against every CUPTI header set it finds (CUDA 12's, 13's):
 * the table of cupti_layout.h holds for each, or the build stops. */
#include "cupti_layout.h"
