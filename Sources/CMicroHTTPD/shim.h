#include <microhttpd.h>
#include <string.h>
#include <strings.h>
#include <stdint.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

// Swift cannot call variadic C functions: these fixed-argument wrappers cover what the stub needs.

// Starts a daemon in thread-per-connection mode (poll(2), so no FD_SETSIZE limit), bound to the numeric address `host` (IPv4 or IPv6) and `port`
// (0 picks a free port); with `tls_cert` and `tls_key` (PEM text, both or neither) it serves HTTPS through GnuTLS,
// TLS 1.2 and later only.
// Returns NULL when the address is not numeric or cannot be bound, or the certificate or key is refused.
static inline struct MHD_Daemon *ubq_mhd_start(const char *host, uint16_t port,
                                               MHD_AccessHandlerCallback handler, void *handler_cls,
                                               MHD_RequestCompletedCallback completed, void *completed_cls,
                                               MHD_NotifyConnectionCallback notify, void *notify_cls,
                                               unsigned int idle_timeout_seconds, unsigned int total_limit,
                                               const char *tls_cert, const char *tls_key) {
    struct sockaddr_in v4;
    struct sockaddr_in6 v6;
    const struct sockaddr *addr;
    unsigned int flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
    memset(&v4, 0, sizeof v4);
    memset(&v6, 0, sizeof v6);
    if (inet_pton(AF_INET, host, &v4.sin_addr) == 1) {
        v4.sin_family = AF_INET;
        v4.sin_port = htons(port);
        addr = (const struct sockaddr *)&v4;
    } else if (inet_pton(AF_INET6, host, &v6.sin6_addr) == 1) {
        v6.sin6_family = AF_INET6;
        v6.sin6_port = htons(port);
        addr = (const struct sockaddr *)&v6;
        flags |= MHD_USE_IPv6;
    } else {
        return NULL;
    }
    if (tls_cert != NULL && tls_key != NULL) {
        return MHD_start_daemon(flags | MHD_USE_TLS, port, NULL, NULL, handler, handler_cls,
                                MHD_OPTION_SOCK_ADDR, addr,
                                MHD_OPTION_HTTPS_MEM_CERT, tls_cert,
                                MHD_OPTION_HTTPS_MEM_KEY, tls_key,
                                MHD_OPTION_HTTPS_PRIORITIES, "NORMAL:-VERS-SSL3.0:-VERS-TLS1.0:-VERS-TLS1.1",
                                MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
                                MHD_OPTION_NOTIFY_CONNECTION, notify, notify_cls,
                                MHD_OPTION_CONNECTION_TIMEOUT, idle_timeout_seconds,
                                MHD_OPTION_CONNECTION_LIMIT, total_limit,
                                MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                                MHD_OPTION_END);
    }
    return MHD_start_daemon(flags, port, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_SOCK_ADDR, addr,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
                            MHD_OPTION_NOTIFY_CONNECTION, notify, notify_cls,
                            MHD_OPTION_CONNECTION_TIMEOUT, idle_timeout_seconds,
                            MHD_OPTION_CONNECTION_LIMIT, total_limit,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                            MHD_OPTION_END);
}

// The socket of a connection, or -1.
static inline int ubq_mhd_connection_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}

// Whether this libmicrohttpd can serve HTTPS.
static inline int ubq_mhd_has_tls(void) { return MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES; }

// The port the daemon actually listens on.
static inline uint16_t ubq_mhd_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

struct ubq_header_seen { const char *name; const char *first; int conflict; };

static enum MHD_Result ubq_header_seen_one(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    struct ubq_header_seen *seen = cls;
    if (key == NULL || strcasecmp(key, seen->name) != 0) return MHD_YES;
    if (value == NULL) value = "";
    if (seen->first == NULL) seen->first = value;
    else if (strcmp(seen->first, value) != 0) seen->conflict = 1;
    return MHD_YES;
}

static enum MHD_Result ubq_header_count_one(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind; (void)value;
    struct ubq_header_seen *seen = cls;
    if (key != NULL && strcasecmp(key, seen->name) == 0) seen->conflict += 1;
    return MHD_YES;
}

// How many times the request carries header `name`.
static inline int ubq_mhd_header_count(struct MHD_Connection *connection, const char *name) {
    struct ubq_header_seen seen = { name, NULL, 0 };
    MHD_get_connection_values(connection, MHD_HEADER_KIND, ubq_header_count_one, &seen);
    return seen.conflict;
}

// Whether the request carries header `name` twice with different values (two Content-Lengths: a request that
// two parsers on its way would split differently).
static inline int ubq_mhd_header_conflicts(struct MHD_Connection *connection, const char *name) {
    struct ubq_header_seen seen = { name, NULL, 0 };
    MHD_get_connection_values(connection, MHD_HEADER_KIND, ubq_header_seen_one, &seen);
    return seen.conflict;
}
