#include "fingerly_curl.h"
