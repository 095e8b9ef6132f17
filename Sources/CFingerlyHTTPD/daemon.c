#include "fingerly_httpd.h"
