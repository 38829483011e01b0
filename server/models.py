"""Checkpoint lifecycle: background load with progress and status, hot reload when the checkpoint folder or the
setting changes (watchdog), swap between jobs, and a broken checkpoint leaving the old model serving."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from dice_copilot.server import backend

if TYPE_CHECKING:
    from dice_copilot.server.server import DiceCopilotServer

RELOAD_DEBOUNCE_S = float(os.environ.get("DICE_COPILOT_RELOAD_DEBOUNCE_S", "1.0"))


class _ChangeForwarder(FileSystemEventHandler):
    """Forwards file events under the checkpoint folder to the event loop."""

    def __init__(self, folder: Path, loop: asyncio.AbstractEventLoop, callback):
        self.folder = folder
        self.loop = loop
        self.callback = callback

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        paths = [Path(os.fsdecode(event.src_path))]
        if getattr(event, "dest_path", ""):
            paths.append(Path(os.fsdecode(event.dest_path)))
        if any(path == self.folder or self.folder in path.parents for path in paths):
            self.loop.call_soon_threadsafe(self.callback)


class ModelManager:
    """Owns the loaded model. `loaded` is read at the start of each engine call, so replacing it swaps checkpoints
    between jobs without disturbing a running one."""

    def __init__(self, server: "DiceCopilotServer"):
        self.server = server
        self.loaded: backend.LoadedModel | None = None
        self.state = "starting"  # starting | loading | ready | error
        self.error: str | None = None
        self.loads = 0
        self._target: tuple[str | None, str] | None = None
        self._loader: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dice-load")
        self._observer: Observer | None = None
        self._watched: Path | None = None
        self._reload_handle: asyncio.TimerHandle | None = None

    @property
    def ready(self) -> bool:
        return self.loaded is not None

    @property
    def untrained(self) -> bool:
        """Whether the checkpoint serving now is marked untrained (false while none is loaded)."""
        return self.loaded is not None and self.loaded.untrained

    def request(self, checkpoint: str | None, device: str, why: str) -> None:
        """Load `checkpoint` on `device` in the background (the latest request wins when several arrive)."""
        self._target = (checkpoint, device)
        if self.loaded is None:
            self.state = "loading"
        self.server.log(f"checkpoint load requested ({why}): {checkpoint or 'default'} on {device}")
        if self._loader is None or self._loader.done():
            self._loader = asyncio.ensure_future(self._load_pending())

    async def _load_pending(self) -> None:
        while self._target is not None:
            checkpoint, device = self._target
            self._target = None
            await self._load(checkpoint, device)

    async def _load(self, checkpoint: str | None, device: str) -> None:
        server = self.server
        name = checkpoint or "default"
        if self.loaded is None:
            self.state = "loading"
        server.send_status("loadingModel", f"loading checkpoint {name}", reason="modelLoading")
        progress = await server.begin_progress("Loading checkpoint", name, cancellable=False)
        loop = asyncio.get_running_loop()
        try:
            loaded = await loop.run_in_executor(self._executor, backend.load_model, checkpoint, device)
        except Exception as error:  # CheckpointError, bad device, unreadable files: the old model keeps serving
            message = f"checkpoint {name} could not be loaded: {error}"
            self.error = message
            server.log(message)
            server.end_progress(progress, "failed")
            if self.loaded is None:
                self.state = "error"
                server.send_status("error", message, reason="checkpointError")
            else:
                self.state = "ready"
                server.send_status("error", f"{message}; still serving {self.loaded.checkpoint}",
                                   reason="checkpointError")
            server.show_message(message + (f" — still serving {self.loaded.checkpoint}" if self.loaded else ""),
                                warning=True)
            self.watch(checkpoint)
            return
        self.loaded = loaded
        self.loads += 1
        self.state = "ready"
        self.error = None
        server.cache.clear()
        untrained = " — UNTRAINED (random weights): its suggestions are noise" if loaded.untrained else ""
        server.log(f"checkpoint {loaded.checkpoint} ({loaded.checkpoint_id}) loaded on {loaded.device} in "
                   f"{loaded.load_seconds:.1f}s{untrained}")
        if loaded.decoding_defaults:
            server.log(f"decoding defaults of {name} (the settings left unset take them): {loaded.decoding_defaults}")
        server.end_progress(progress, f"loaded {name}")
        server.send_status("ready", f"checkpoint {name} ready on {loaded.device}{untrained}", reason="ok")
        self.watch(checkpoint)

    # ---- hot reload --------------------------------------------------------------------------------------------

    def watch(self, checkpoint: str | None) -> None:
        """Watch a checkpoint folder (and its parent, so an atomic replace by rename is seen)."""
        folder = Path(checkpoint).expanduser().resolve() if checkpoint and checkpoint != "default" else None
        if folder == self._watched and self._observer is not None:
            return
        self.stop_watching()
        if folder is None or not folder.parent.is_dir():
            return
        observer = Observer()
        handler = _ChangeForwarder(folder, asyncio.get_running_loop(), self._on_change)
        observer.schedule(handler, str(folder.parent), recursive=False)
        if folder.is_dir():
            observer.schedule(handler, str(folder), recursive=True)
        observer.daemon = True
        observer.start()
        self._observer, self._watched = observer, folder

    def _on_change(self) -> None:
        if self._reload_handle is not None:
            self._reload_handle.cancel()
        self._reload_handle = asyncio.get_running_loop().call_later(RELOAD_DEBOUNCE_S, self._reload_if_changed)

    def _reload_if_changed(self) -> None:
        self._reload_handle = None
        settings = self.server.settings
        fingerprint = backend.checkpoint_fingerprint(settings.checkpoint)
        if self.loaded is not None and fingerprint == self.loaded.checkpoint_id:
            return
        if self._watched is not None and not self._watched.is_dir():
            return  # mid-replacement: the folder reappears and fires another event
        self.stop_watching()  # the folder may be a new inode now; `_load` watches it again
        self.request(settings.checkpoint, settings.device, "checkpoint folder changed")

    def stop_watching(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer = None
        self._watched = None

    def shutdown(self) -> None:
        self.stop_watching()
        self._executor.shutdown(wait=False, cancel_futures=True)
