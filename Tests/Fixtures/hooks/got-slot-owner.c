// A plugin that calls getenv through its own PLT: a GOT slot that exists only while it is loaded.
#include <stdlib.h>

int got_slot_owner_has_home(void) { return getenv("HOME") != NULL; }
