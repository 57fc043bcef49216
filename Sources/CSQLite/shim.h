#include <sqlite3.h>
// SQLITE_TRANSIENT is a macro over a cast that Swift cannot import.
static inline sqlite3_destructor_type ubq_sqlite_transient(void) { return SQLITE_TRANSIENT; }
