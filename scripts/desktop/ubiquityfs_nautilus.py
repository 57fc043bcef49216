"""GNOME Files (Nautilus 43+, nautilus-python 4) extension for ubiquityfs mounts.

Each file in a ubiquityfs mount gets an emblem for its sync state (not downloaded, downloading, uploading,
current, conflict, error), read from the `user.ubiquity.*` status attributes, and its context menu offers
"Download now", "Remove download" and "Keep on this device" / "Stop keeping on this device", which set the
action attributes (`user.ubiquity.download`, `user.ubiquity.evict`, `user.ubiquity.pinned`).

The attributes are read on Files' own thread: the mount answers them from its local metadata, never from the
network (nautilus-python keeps Python's lock while Files waits for events, so worker threads would crawl). A
file in a passing state (downloading, uploading) is read again every second until it settles, so its emblem
follows the transfer.

Installed by `scripts/install` (and `scripts/setup --desktop`) in PREFIX/share/nautilus-python/extensions,
with its emblems in PREFIX/share/icons/hicolor/scalable/emblems. The part above the Nautilus classes needs
only the standard library, so the tests import it to check the states and actions against a real mount.
Set UBIQUITYFS_NAUTILUS_LOG=FILE to have every answer (emblem, menu, action) appended to FILE.
"""
import errno
import os
import time
from urllib.parse import unquote, urlparse

PREFIX = "user.ubiquity."

# state -> emblem, which Files draws with the icon `emblem-NAME`: this extension's own icons (emblems/ next to
# it in the source tree), installed in the hicolor theme's scalable/emblems.
EMBLEMS = {
    "notDownloaded": "ubiquityfs-cloud",
    "downloading": "ubiquityfs-downloading",
    "uploading": "ubiquityfs-uploading",
    "current": "ubiquityfs-current",
    "conflict": "ubiquityfs-conflict",
    "error": "ubiquityfs-error",
}
PASSING = {"downloading", "uploading"}

# action -> (menu label, attribute, value)
ACTIONS = {
    "download": ("Download now", "download", b"1"),
    "evict": ("Remove download", "evict", b"1"),
    "pin": ("Keep on this device", "pinned", b"1"),
    "unpin": ("Stop keeping on this device", "pinned", b"0"),
}


def log(line):
    target = os.environ.get("UBIQUITYFS_NAUTILUS_LOG")
    if target:
        with open(target, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {line}\n")


def attributes(path):
    """The item's `user.ubiquity.*` attributes by short name, or None when it is not in a ubiquityfs mount
    (or is gone)."""
    try:
        names = [n for n in os.listxattr(path, follow_symlinks=False) if n.startswith(PREFIX)]
        if not names:
            return None
        values = {}
        for name in names:
            try:
                values[name[len(PREFIX):]] = os.getxattr(path, name, follow_symlinks=False).decode("utf-8", "replace")
            except OSError as e:
                if e.errno != errno.ENODATA:  # an attribute that went between the list and the read
                    raise
        return values if values.get("isUbiquitous") == "1" else None
    except OSError:
        return None


def state_of(values):
    """The one state an emblem shows, the most pressing first: a conflict or an error needs the user; a
    transfer in flight is passing; then whether the content is here at all."""
    if values.get("hasUnresolvedConflicts") == "1":
        return "conflict"
    if "downloadingError" in values or "uploadingError" in values:
        return "error"
    if values.get("isDownloading") == "1":
        return "downloading"
    if values.get("isUploading") == "1" or values.get("isUploaded") == "0":
        return "uploading"
    if values.get("downloadingStatus") == "notDownloaded":
        return "notDownloaded"
    return "current"


def actions_for(values, is_directory):
    """The menu's actions for an item with these attributes: a folder offers all three (they apply to every
    file below); a file only those that would change something."""
    if is_directory:
        return ["download", "evict", "unpin" if values.get("pinned") == "1" else "pin"]
    offered = []
    if values.get("downloadingStatus") != "current" and values.get("isDownloading") != "1":
        offered.append("download")
    if values.get("downloadingStatus") != "notDownloaded" and values.get("isUploaded") == "1" \
            and values.get("pinned") != "1":
        offered.append("evict")
    offered.append("unpin" if values.get("pinned") == "1" else "pin")
    return offered


def perform(path, action):
    """Sets the action's attribute on PATH; returns None, or the error's text (evicting what is not yet
    uploaded is refused with EBUSY, for instance)."""
    _, name, value = ACTIONS[action]
    try:
        os.setxattr(path, PREFIX + name, value, follow_symlinks=False)
        log(f"action {path} {action} ok")
        return None
    except OSError as e:
        log(f"action {path} {action} {errno.errorcode.get(e.errno, e.errno)}")
        return f"{ACTIONS[action][0]}: {os.path.basename(path)}: {os.strerror(e.errno)}"


def local_path(uri):
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else None


try:
    import gi
    gi.require_version("Nautilus", "4.0")
    from gi.repository import Gio, GLib, GObject, Nautilus
except (ImportError, ValueError):  # imported by a test, or by a Files without nautilus-python 4
    Nautilus = None

if Nautilus is not None:
    class UbiquityStateEmblems(GObject.GObject, Nautilus.InfoProvider, Nautilus.MenuProvider):
        def __init__(self):
            super().__init__()
            self.passing = {}  # uri -> (FileInfo, its state): read again every second while the state is passing
            GLib.timeout_add_seconds(1, self.read_passing_again)

        # InfoProvider
        def update_file_info(self, file):
            path = local_path(file.get_uri())
            values = attributes(path) if path else None
            if values is None:
                return
            uri, state = file.get_uri(), state_of(values)
            file.add_emblem(EMBLEMS[state])
            if state in PASSING:
                self.passing[uri] = (file, state)
            else:
                self.passing.pop(uri, None)
            log(f"emblem {path} {state}")

        def read_passing_again(self):
            """Files draws an item again (and rebuilds an open menu) when its extension info is invalidated, so
            only an item whose state has changed is."""
            for uri, (file, state) in list(self.passing.items()):
                values = attributes(local_path(uri))
                if values is None or state_of(values) != state:
                    del self.passing[uri]
                    file.invalidate_extension_info()
            return True

        # MenuProvider
        def get_file_items(self, files):
            """The actions every selected item offers, from its attributes read now."""
            paths = [local_path(f.get_uri()) for f in files]
            values = [attributes(path) if path else None for path in paths]
            if not files or any(v is None for v in values):
                return []
            offered = None
            for v, f in zip(values, files):
                mine = actions_for(v, f.is_directory())
                offered = mine if offered is None else [a for a in offered if a in mine]
            log(f"menu {' '.join(paths)} {','.join(offered)}")
            items = []
            for action in offered:
                item = Nautilus.MenuItem(name=f"UbiquityFS::{action}", label=ACTIONS[action][0])
                item.connect("activate", self.activate, action, list(zip(paths, files)))
                items.append(item)
            return items

        @staticmethod
        def activate(_item, action, targets):
            """Sets the action's attribute on each item (the mount starts a download in the background and
            answers at once), reads the emblems again, and tells a refusal the way Files tells its own."""
            refusals = [r for r in (perform(path, action) for path, _ in targets) if r]
            for _, file in targets:
                file.invalidate_extension_info()
            application = Gio.Application.get_default()
            if refusals and application is not None:
                notice = Gio.Notification.new("ubiquityfs")
                notice.set_body("\n".join(refusals))
                application.send_notification(None, notice)
