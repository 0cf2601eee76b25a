"""A stand-in for NVIDIA's VSS RT-VLM perf harness (``perf/benchmark/rtvi_perf_benchmark.py``),
written from the facts in ``shared/contracts/vss-harness.md``: the same command line, config,
log lines, HTTP conversation and output layout, run against the emulator as a real program.

What it shares with the harness (so ``type: benchmark`` is tested against the real shape):
- ``--config FILE [--scenario NAME] [--list-scenarios] [--list-modes] [--debug]
  [--initial-stream-count N] [--add-stream-count N] [--[no-]binary-search-refinement]
  [--concurrency-levels N [N ...]] [--output-json PATH] [--config-id ID]``; argparse errors exit
  2; everything is logged on stderr as ``<asctime> - <LEVEL> - <message>``; stdout stays empty.
- The config: ``global`` (``rtvi_backend`` with ``/v1``, ``output_dir``, ``vlm_gpus``
  required, ``vlm_api_mode``, ``blocking_stream_delete``, ``stream_delete_timeout_seconds``,
  ``generate_captions_params``, ``prompt``, ``required_live_route``) and ``test_scenarios``;
  ``RTVI_BACKEND`` and ``RTVI_VLM_API_MODE`` from the environment; the BCD live-source guard
  (config file name or ``output_dir`` containing ``bcd``).
- Live modes list streams strictly before and after, add one stream per call (client UUIDs and
  sensor names in the concurrent and max modes), caption over SSE and measure latency as
  receive time - ``media_info.end_timestamp``; single_live_stream deletes its stream while its
  captions are open and waits for ``[DONE]``; the others stop captions per stream, batch-delete
  and poll the listing. Only HTTP 503 ``ServerBusy``/``ResourceUnavailable`` is resource-bound.
- Output: ``<output_dir>/<scenario>/`` recreated, ``execution_summary.json``, per-test-case
  folders (``test_case_summary.json``, ``iteration_<N>/...``, ``max_live_streams_results.json``),
  and the ``--output-json`` document (``schema_version`` 0.1, ``summary.overall_status``) for a
  successful file_burst, concurrent_live_streams or max_live_streams scenario. Exit 0 only when
  every scenario passed.

Where it is simpler (documented, so nobody mistakes it for the harness): no GPU, CPU or
Prometheus monitoring, no spreadsheets, no file-burst target-latency search, no latency
plateaus; ``max_live_streams`` ramps and bisects on the same window rules but reads a window
every ``stability_check_interval`` seconds of wall time with small defaults; a caption stream
that never ends is given up after 120 s (the harness waits forever); modes other than the four
live and file modes below fail their scenario as unknown to the stand-in.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import logging
import math
import os
import re
import shutil
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml

LOG = logging.getLogger("rtvi_perf_benchmark")
MODES = ("single_file", "file_burst", "max_live_streams", "concurrent_live_streams",
         "concurrency", "single_live_stream", "text_embedding", "text_embedding_concurrency")
LIVE_MODES = ("max_live_streams", "concurrent_live_streams", "single_live_stream")
JSON_MODES = ("max_live_streams", "concurrent_live_streams", "file_burst")
DEFAULT_PARAMS = {"temperature": 0.7, "max_tokens": 85}
BCD_ROUTE = re.compile(r"^rtsp://[^/:]+:\d+/live/[^/]+$")
SSE_GIVE_UP_S = 120.0
THREAD_WAIT_S = 30.0


class ScenarioError(Exception):
    """The scenario cannot run (its text goes to the log and the summary)."""


class ResourceBound(Exception):
    """HTTP 503 with ServerBusy / ResourceUnavailable: the service is at capacity."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code = status, code


# --- HTTP ----------------------------------------------------------------------------------

class Api:
    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self.http = httpx.Client(timeout=httpx.Timeout(180.0, connect=10.0), trust_env=False,
                                 limits=httpx.Limits(max_connections=1024))

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self.http.request(method, f"{self.base}{path}", **kwargs)
        if response.status_code >= 400:
            raise httpx.HTTPStatusError(f"{response.status_code} {response.text[:300]}",
                                        request=response.request, response=response)
        return response

    def listed(self) -> set[str]:
        try:
            items = self.call("GET", "/streams/get-stream-info").json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ScenarioError(f"Could not fetch active stream IDs: {exc}") from None
        return {str(i["id"]) for i in items if isinstance(i, dict) and "id" in i}

    def model(self) -> str:
        return str(self.call("GET", "/models").json()["data"][0]["id"])

    def metrics(self) -> dict[str, float]:
        found: dict[str, float] = {}
        try:
            text = self.call("GET", "/metrics").text
        except httpx.HTTPError:
            return {}
        for line in text.split("\n"):
            parts = line.split(" ")
            if (line and not line.startswith("#") and len(parts) == 2
                    and parts[0].endswith(("_latest", "_sum", "_count", "_seconds"))):
                try:
                    found[parts[0]] = float(parts[1])
                except ValueError:
                    continue
        return found

    def add_stream(self, url: str, description: str, stream_id: str | None = None,
                   sensor: str | None = None) -> tuple[str, dict[str, Any]]:
        entry: dict[str, Any] = {"liveStreamUrl": url, "description": description}
        if stream_id:
            entry |= {"id": stream_id, "sensor_name": sensor}
        response = self.http.post(f"{self.base}/streams/add", json={"streams": [entry]})
        if response.status_code >= 400:
            raise start_error(response)
        body = response.json()
        if body.get("errors"):
            raise ScenarioError(str(body["errors"][0].get("error")))
        results = body.get("results") or []
        if not results or not results[0].get("id"):
            raise ScenarioError("No results returned from API")
        return str(results[0]["id"]), body

    def delete_batch(self, ids: list[str], blocking: bool, timeout_s: float) -> list[str]:
        """Delete ``ids`` (409 retried); the ones still not gone."""
        pending = list(ids)
        for _attempt in range(5):
            body: dict[str, Any] = {"stream_ids": pending}
            if blocking:
                body |= {"blocking": True, "drain_timeout_seconds": timeout_s}
            answer = self.http.request("DELETE", f"{self.base}/streams/delete-batch", json=body,
                                       timeout=timeout_s + 30)
            if answer.status_code != 200:
                raise ScenarioError(f"batch delete answered {answer.status_code}")
            errors = answer.json().get("errors") or []
            pending = [e["stream_id"] for e in errors if e.get("status_code") == 409]
            failed = [e for e in errors if e.get("status_code") not in (400, 404, 409)]
            if failed:
                raise ScenarioError(f"batch delete failed: {failed}")
            if not pending:
                break
            time.sleep(1)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            left = [i for i in ids if i in self.listed()]
            if not left:
                return []
            time.sleep(0.5)
        raise ScenarioError(f"streams still listed after delete: {left}")


def start_error(response: httpx.Response) -> Exception:
    try:
        body = response.json()
    except ValueError:
        body = {}
    code = str(body.get("code", "")) if isinstance(body, dict) else ""
    message = str(body.get("message") or body.get("detail") or response.text)
    if response.status_code == 503 and (code in ("ServerBusy", "ResourceUnavailable")
                                        or "Insufficient GPU memory" in message):
        return ResourceBound(response.status_code, code, message)
    return ScenarioError(f"{response.status_code} {code}: {message}")


def latency_of(event: dict[str, Any], received: float) -> float | None:
    info = event.get("media_info")
    if not isinstance(info, dict) or info.get("type") != "timestamp":
        return None
    try:
        end = datetime.datetime.strptime(str(info["end_timestamp"]), "%Y-%m-%dT%H:%M:%S.%fZ")
    except (KeyError, ValueError):
        return None
    return max(0.0, received - end.replace(tzinfo=datetime.UTC).timestamp())


class Captions:
    """One streamed caption request on one stream, read on its own thread."""

    def __init__(self, api: Api, body: dict[str, Any]) -> None:
        self.api, self.body = api, body
        self.latencies: list[float] = []
        self.chunk_ids: list[int] = []
        self.errors: list[str] = []
        self.done = False
        self.admitted = threading.Event()
        self.refusal: Exception | None = None
        self.on_event: Any = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()
        if not self.admitted.wait(30):
            raise ScenarioError("caption request not admitted within 30 s")
        if self.refusal is not None:
            raise self.refusal

    def _run(self) -> None:
        try:
            with self.api.http.stream("POST", f"{self.api.base}/generate_captions",
                                      json=self.body,
                                      timeout=httpx.Timeout(SSE_GIVE_UP_S, connect=10)) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    self.refusal = start_error(resp)
                    return
                self.admitted.set()
                for line in resp.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        self.done = True
                        return
                    self._event(data)
        except httpx.HTTPError as exc:
            self.errors.append(f"caption stream: {exc}")
        finally:
            self.admitted.set()

    def _event(self, data: str) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        if event.get("error"):
            self.errors.append(str(event["error"]))
        latency = latency_of(event, time.time())
        for chunk in event.get("chunk_responses") or []:
            if isinstance(chunk, dict):
                if chunk.get("error"):
                    self.errors.append(str(chunk["error"]))
                if isinstance(chunk.get("chunk_id"), int):
                    self.chunk_ids.append(chunk["chunk_id"])
        if latency is not None and event.get("chunk_responses"):
            self.latencies.append(latency)
        if self.on_event is not None:
            self.on_event()


def percentile(values: list[float], p: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return round(ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1], 4)


def stats(values: list[float]) -> dict[str, Any]:
    return {"avg_latency": round(sum(values) / len(values), 4) if values else None,
            "max_latency": max(values, default=None), "min_latency": min(values, default=None),
            "total_measurements": len(values),
            **{f"p{p}_latency": percentile(values, p) for p in (50, 75, 90, 95, 99)}}


def dropped(ids: list[int]) -> int:
    return sum(b - a - 1 for a, b in itertools.pairwise(ids) if b > a + 1)


def write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str))


# --- the scenario --------------------------------------------------------------------------

class Scenario:
    def __init__(self, name: str, spec: dict[str, Any], glob: dict[str, Any], api: Api,
                 out: Path, args: argparse.Namespace) -> None:
        self.name, self.spec, self.glob, self.api, self.args = name, spec, glob, api, args
        self.mode = str(spec.get("benchmark_mode", "single_file"))
        self.dir = out / name
        self.model = ""
        self.blocking = _truthy(os.environ.get("RTVI_BENCHMARK_BLOCKING_STREAM_DELETE",
                                               glob.get("blocking_stream_delete", False)))
        self.delete_timeout = float(os.environ.get(
            "RTVI_BENCHMARK_STREAM_DELETE_TIMEOUT_SEC",
            glob.get("stream_delete_timeout_seconds", 300)))

    def api_mode(self, video: dict[str, Any]) -> str:
        return str(video.get("vlm_api_mode") or self.spec.get("vlm_api_mode")
                   or self.glob.get("vlm_api_mode") or os.environ.get("RTVI_VLM_API_MODE")
                   or "generate_captions")

    def params(self, video: dict[str, Any]) -> dict[str, Any]:
        merged = dict(DEFAULT_PARAMS)
        for source in (self.glob, self.spec, video):
            merged |= source.get("generate_captions_params") or {}
        return merged

    def caption_body(self, video: dict[str, Any], asset: str, chunk: int,
                     stream: bool) -> dict[str, Any]:
        params = self.params(video)
        body: dict[str, Any] = {"id": [asset], "model": self.model, "stream": stream,
                                "chunk_duration": chunk, "response_format": {"type": "text"},
                                "temperature": params["temperature"],
                                "max_tokens": params["max_tokens"]}
        if stream:
            body["stream_options"] = {"include_usage": True}
        prompt = video.get("prompt") or self.glob.get("prompt")
        if prompt:
            body["prompt"] = prompt
        return body

    def run(self) -> dict[str, Any]:
        if self.mode not in MODES:
            raise ScenarioError(f"Error: Unknown benchmark mode: {self.mode}. "
                                f"Available modes: {list(MODES)}")
        if "vlm_gpus" not in self.glob:
            raise ScenarioError("Missing required global config field: vlm_gpus")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        runner = {"single_live_stream": self.single, "concurrent_live_streams": self.concurrent,
                  "max_live_streams": self.max_live, "file_burst": self.file_burst}.get(
                      self.mode)
        if runner is None:
            raise ScenarioError(f"the stand-in does not implement {self.mode}")
        if self.mode in LIVE_MODES:
            before = self.api.listed()
            if before:
                raise ScenarioError(f"Active streams found before scenario: {sorted(before)}")
        self.model = self.api.model()
        cases: list[dict[str, Any]] = []
        for video in self.spec.get("videos") or []:
            for chunk in video.get("chunk_sizes") or [10]:
                cases += runner(video, int(chunk))
        summary = {"scenario_name": self.name, "benchmark_mode": self.mode,
                   "scenario_dir": str(self.dir), "test_cases": cases,
                   "total_test_cases": len(cases),
                   "successful_test_cases": sum(bool(c.get("success")) for c in cases),
                   "failed_test_cases": sum(not c.get("success") for c in cases)}
        write(self.dir / "execution_summary.json", summary)
        return summary

    def after(self) -> None:
        if self.mode in LIVE_MODES:
            left = self.api.listed()
            if left:
                raise ScenarioError(f"post-scenario verification failed: streams still "
                                    f"listed: {sorted(left)}")

    # --- single_live_stream ----------------------------------------------------------------

    def single(self, video: dict[str, Any], chunk: int) -> list[dict[str, Any]]:
        tcid = f"single_live_stream_{video.get('name') or 'live_stream'}_{chunk}sec"
        duration = float(video.get("duration_seconds", self.spec.get("duration_seconds", 60)))
        iterations: list[dict[str, Any]] = []
        for n in range(1, int(self.spec.get("iterations", 1)) + 1):
            folder = self.dir / tcid / f"iteration_{n}"
            stream_id, added = self.api.add_stream(
                str(video["rtsp_url"]), f"Single live stream test iteration {n}")
            write(folder / "stream_add_response.json", added)
            captions = Captions(self.api, self.caption_body(video, stream_id, chunk, True))
            started = time.monotonic()
            deleted = threading.Event()

            def maybe_delete(ident: str = stream_id, begun: float = started,
                             flag: threading.Event = deleted) -> None:
                if not flag.is_set() and time.monotonic() - begun >= duration:
                    flag.set()
                    try:  # while the caption stream is still open, as the harness does
                        self.api.call("DELETE", f"/streams/delete/{ident}")
                    except httpx.HTTPError as exc:
                        LOG.error("Failed to delete stream %s: %s", ident, exc)
            captions.on_event = maybe_delete
            metrics = self.api.metrics()
            try:
                captions.start()
                captions.thread.join(duration + SSE_GIVE_UP_S)
            finally:
                write(folder / "metrics.json", metrics | self.api.metrics())
                if not deleted.is_set():
                    self._forget(stream_id)
            write(folder / "generate_captions_response.json", {
                "latencies": captions.latencies, "event_count": len(captions.chunk_ids),
                "duration_seconds": round(time.monotonic() - started, 2),
                **({"avg_latency": stats(captions.latencies)["avg_latency"]}
                   if captions.latencies else {})})
            ok = captions.done and bool(captions.latencies) and not captions.errors
            iterations.append({"iteration": n, "success": ok, "stream_id": stream_id,
                               "captions_generation_completed": captions.done,
                               "latency_data": stats(captions.latencies),
                               **({} if ok else {"error": "; ".join(captions.errors) or (
                                   "caption stream did not end with [DONE]" if not
                                   captions.done else "no latency measurement")})})
        case = {"test_case_id": tcid, "rtsp_url": video["rtsp_url"], "chunk_size": chunk,
                "iterations": len(iterations),
                "successful_iterations": sum(i["success"] for i in iterations),
                "success": any(i["success"] for i in iterations),
                "iteration_results": iterations}
        write(self.dir / tcid / "test_case_summary.json", case)
        return [case]

    def _forget(self, stream_id: str) -> None:
        try:
            self.api.call("DELETE", f"/streams/delete/{stream_id}")
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code not in (400, 404):
                raise ScenarioError(f"cleanup: {exc}") from None

    # --- live streams, N at a time -------------------------------------------------------

    def urls(self, video: dict[str, Any], count: int) -> list[str]:
        if video.get("rtsp_urls"):
            pool = [str(u) for u in video["rtsp_urls"]]
            return [pool[i % len(pool)] for i in range(count)]
        return [str(video["rtsp_url"])] * count

    def open_streams(self, video: dict[str, Any], chunk: int, urls: list[str],
                     opened: list[tuple[str, Captions]]) -> None:
        """Add each URL's stream and start its captions, one after another, onto ``opened``
        (what was opened before a refusal stays there, for the cleanup)."""
        for n, url in enumerate(urls, len(opened) + 1):
            ident = str(uuid.uuid4())
            try:
                stream_id, _ = self.api.add_stream(url, f"Test stream {n}", ident,
                                                   f"rtvi-perf-{n}-{ident[:8]}")
            except ScenarioError:
                for _retry in range(2):  # a bad source: retried, 2 s apart
                    time.sleep(2)
                    try:
                        stream_id, _ = self.api.add_stream(url, f"Test stream {n}", ident,
                                                           f"rtvi-perf-{n}-{ident[:8]}")
                        break
                    except ScenarioError:
                        continue
                else:
                    raise
            captions = Captions(self.api, self.caption_body(video, stream_id, chunk, True))
            opened.append((stream_id, captions))
            captions.start()

    def close_streams(self, opened: list[tuple[str, Captions]]) -> None:
        if not opened:
            return
        if not self.blocking:
            for stream_id, _ in opened:
                try:
                    self.api.call("DELETE", f"/generate_captions/{stream_id}")
                except httpx.HTTPStatusError as exc:
                    if exc.response.status_code not in (400, 404):
                        LOG.warning("stop %s: %s", stream_id, exc)
            self._join(opened)
        self.api.delete_batch([s for s, _ in opened], self.blocking, self.delete_timeout)
        if self.blocking:
            self._join(opened)

    def _join(self, opened: list[tuple[str, Captions]]) -> None:
        deadline = time.monotonic() + THREAD_WAIT_S
        for _, captions in opened:
            captions.thread.join(max(0.0, deadline - time.monotonic()))
        alive = [s for s, c in opened if c.thread.is_alive()]
        if alive:
            raise ScenarioError(f"cleanup failed: caption streams still open after "
                                f"{THREAD_WAIT_S:.0f}s: {alive}")

    def concurrent(self, video: dict[str, Any], chunk: int) -> list[dict[str, Any]]:
        counts = video.get("stream_count", self.spec.get("stream_count", [1]))
        counts = counts if isinstance(counts, list) else [counts]
        duration = float(video.get("duration_seconds", self.spec.get("duration_seconds", 120)))
        cases = []
        for count in counts:
            tcid = (f"concurrent_live_streams_{video.get('name') or 'live_stream'}_{chunk}sec_"
                    f"{count}streams")
            iterations: list[dict[str, Any]] = []
            bound: ResourceBound | None = None
            for n in range(1, int(self.spec.get("iterations", 1)) + 1):
                opened: list[tuple[str, Captions]] = []
                try:
                    self.open_streams(video, chunk, self.urls(video, int(count)), opened)
                    start_metrics = self.api.metrics()
                    time.sleep(duration)
                    end_metrics = self.api.metrics()
                except ResourceBound as exc:
                    bound = exc
                    self.close_streams(opened)
                    break
                except ScenarioError as exc:
                    LOG.error("Aborting concurrent stream ramp: %s", exc)
                    self.close_streams(opened)
                    iterations.append({"iteration": n, "success": False, "error": str(exc)})
                    continue
                self.close_streams(opened)
                latencies = [x for _, c in opened for x in c.latencies]
                with_errors = sum(bool(c.errors) for _, c in opened)
                result = {"iteration": n, "benchmark_mode": self.mode,
                          "rtsp_url": video.get("rtsp_url"), "chunk_size": chunk,
                          "stream_count": count, "actual_streams_started": len(opened),
                          "streams_with_errors": with_errors, "duration_seconds": duration,
                          **stats(latencies),
                          "per_stream_stats": {s: stats(c.latencies) for s, c in opened},
                          "latency_history": {s: c.latencies for s, c in opened},
                          **_decode(start_metrics, end_metrics)}
                result["success"] = (len(opened) == count and with_errors == 0
                                     and bool(latencies))
                write(self.dir / tcid / f"iteration_{n}" /
                      "concurrent_live_streams_results.json", result)
                iterations.append(result)
            if bound is not None:
                cases.append({"test_case_id": tcid, "success": False, "error": str(bound),
                              "resource_bound": True, "status_code": bound.status,
                              "code": bound.code})
                continue
            good = [i for i in iterations if i.get("success")]
            case = {"test_case_id": tcid, "benchmark_mode": self.mode, "stream_count": count,
                    "chunk_size": chunk, "iterations": len(iterations),
                    "successful_iterations": len(good),
                    "success": bool(iterations) and len(good) == len(iterations),
                    "iteration_results": iterations,
                    "mean_avg_latency": _mean(i.get("avg_latency") for i in good),
                    "mean_p95_latency": _mean(i.get("p95_latency") for i in good),
                    "mean_decode_latency_seconds_avg": _mean(
                        i.get("decode_latency_seconds_avg") for i in good)}
            if not case["success"]:
                case["error"] = "; ".join(str(i.get("error") or "completed without valid "
                                              "measurements") for i in iterations
                                          if not i.get("success")) or "no iteration ran"
            write(self.dir / tcid / "test_case_summary.json", case)
            cases.append(case)
        return cases

    # --- max_live_streams ------------------------------------------------------------------

    def max_live(self, video: dict[str, Any], chunk: int) -> list[dict[str, Any]]:
        tcid = f"max_live_streams_{video.get('name') or 'live_stream'}_{chunk}sec"
        cfg = self.spec | video
        threshold = float(cfg["latency_threshold_seconds"])
        initial = self.args.initial_stream_count or int(cfg.get("initial_stream_count", 5))
        step = self.args.add_stream_count or int(cfg.get("add_stream_count", 1))
        refine = (self.args.refine if self.args.refine is not None
                  else bool(cfg.get("binary_search_refinement", True)))
        window_s = float(cfg.get("stability_check_interval", 60))
        need_stable = int(cfg.get("required_stable_windows", 3))
        need_unstable = int(cfg.get("required_unstable_windows", 2))
        cap = int(cfg.get("max_stream_count", 300))
        fresh_timeout = float(cfg.get("fresh_latency_timeout_seconds",
                                      window_s * (need_stable + need_unstable)))
        opened: list[tuple[str, Captions]] = []
        snapshots: list[dict[str, Any]] = []
        start_metrics = self.api.metrics()

        def resize(count: int) -> None:
            while len(opened) > count:
                stream_id, captions = opened.pop()
                self.close_streams([(stream_id, captions)])
            if count > len(opened):
                self.open_streams(video, chunk, self.urls(video, count - len(opened)), opened)

        def judge(count: int, needed: int) -> bool:
            """Windows at ``count`` streams until ``need_stable`` stable (True) or ``needed``
            unstable (False) in a row."""
            stable = unstable = 0
            short_since: float | None = None  # fresh coverage short since then: pending
            marks = {s: (len(c.latencies), len(c.chunk_ids)) for s, c in opened}
            while True:
                time.sleep(window_s)
                fresh = [c.latencies[marks[s][0]:] for s, c in opened]
                covered = sum(bool(f) for f in fresh) / max(1, len(opened))
                if covered < 0.9:
                    short_since = short_since or time.monotonic() - window_s
                    if time.monotonic() - short_since < fresh_timeout:
                        LOG.info("Window at %d streams pending: coverage %.2f", count, covered)
                        stable = unstable = 0
                        continue
                else:
                    short_since = None
                recent = [x for f in fresh for x in f[-3:]]
                p95 = percentile(recent, 95)
                drops = sum(dropped(c.chunk_ids[marks[s][1]:]) for s, c in opened)
                ok = covered >= 0.9 and p95 is not None and p95 <= threshold and drops == 0
                snapshots.append({"stream_count": count, "p95_latency": p95,
                                  "dropped_chunks": drops})
                LOG.info("Window at %d streams: p95 %s s, coverage %.2f, %s", count, p95,
                         covered, "stable" if ok else "unstable")
                marks = {s: (len(c.latencies), len(c.chunk_ids)) for s, c in opened}
                stable, unstable = (stable + 1, 0) if ok else (0, unstable + 1)
                if stable >= need_stable:
                    return True
                if unstable >= needed:
                    return False

        last_stable, first_unstable, add_failure = 0, None, False
        count = min(initial, cap)
        bisected = False
        try:
            try:
                resize(count)
            except (ResourceBound, ScenarioError) as exc:
                LOG.warning("Stream add failed at %d streams: %s", len(opened) + 1, exc)
                add_failure, count = True, len(opened)
            while count > 0:
                if judge(count, need_unstable):
                    last_stable = count
                    if add_failure or count >= cap:
                        break
                    target = min(count + step, cap)
                    try:
                        resize(target)
                    except (ResourceBound, ScenarioError) as exc:
                        LOG.warning("Stream add failed at %d streams: %s", len(opened), exc)
                        first_unstable, add_failure = len(opened) + 1, True
                        break
                    count = target
                else:
                    first_unstable = count
                    break
            low, high = last_stable, first_unstable
            while refine and high is not None and high - low > 1:
                bisected = True
                mid = (low + high) // 2
                try:
                    resize(mid)
                    stable = judge(mid, max(need_unstable, 3))
                except (ResourceBound, ScenarioError):
                    stable = False
                low, high = (mid, high) if stable else (low, mid)
            last_stable, first_unstable = low, high
        finally:
            end_metrics = self.api.metrics()
            self.close_streams(opened)
        result = {"test_case_id": tcid, "benchmark_mode": self.mode, "chunk_size": chunk,
                  "rtsp_url": video.get("rtsp_url"), "initial_stream_count": initial,
                  "max_sustainable_streams": last_stable,
                  "degradation_detected": first_unstable is not None,
                  "stream_add_failure": add_failure,
                  "latency_threshold_seconds": threshold,
                  "last_stable_stream_count": last_stable,
                  # as the harness: 0 when the ramp ended without an unstable count
                  "first_unstable_stream_count": first_unstable or 0,
                  "last_stable_p95": _last_stable_p95(snapshots, last_stable),
                  "latency_snapshots": snapshots,
                  "phase2_binary_search_applied": bisected,
                  "phase2_stable_start": None,
                  "phase2_final_stable": last_stable if bisected else None,
                  "phase2_unstable_ceiling": first_unstable if bisected else None,
                  "total_dropped_chunks": sum(s["dropped_chunks"] for s in snapshots),
                  **_decode(start_metrics, end_metrics)}
        result["success"] = last_stable > 0
        write(self.dir / tcid / "max_live_streams_results.json", result)
        if not result["success"]:
            result["error"] = "no stable stream count found"
        return [result]

    # --- file_burst --------------------------------------------------------------------------

    def file_burst(self, video: dict[str, Any], chunk: int) -> list[dict[str, Any]]:
        path = Path(str(video["filepath"])).resolve()
        named = f"{video['name']}_" if video.get("name") else ""
        tcid = f"file_burst_{named}{path.stem}_{chunk}sec"
        levels = [int(n) for n in video.get("concurrency_levels") or [1]]
        mode = self.api_mode(video)
        iterations: list[dict[str, Any]] = []
        for n in range(1, int(self.spec.get("iterations", 1)) + 1):
            folder = self.dir / tcid / f"iteration_{n}"
            rows = [self._level(video, chunk, path, level, mode, folder) for level in levels]
            result = {"iteration": n, "benchmark_mode": self.mode, "video_file": str(path),
                      "chunk_size": chunk, "concurrency_levels_tested": levels,
                      "concurrency_results": rows, "optimal_target_concurrency": None,
                      "failed_files": sum(r["failed_files"] for r in rows),
                      "success": all(r["failed_files"] == 0 for r in rows)}
            write(folder / "file_burst_results.json", result)
            iterations.append(result)
        summary = {str(level): {
            "concurrency_level": level,
            **{f"mean_{key}": _mean(r[key] for i in iterations for r in i["concurrency_results"]
                                    if r["concurrency_level"] == level)
               for key in ("avg_latency", "p50_latency", "p95_latency", "p99_latency",
                           "failed_files")},
            "mean_throughput": _mean(r["throughput_files_per_second"] for i in iterations
                                     for r in i["concurrency_results"]
                                     if r["concurrency_level"] == level)} for level in levels}
        case = {"test_case_id": tcid, "benchmark_mode": self.mode, "video_file": str(path),
                "chunk_size": chunk, "concurrency_levels": levels, "iterations": len(iterations),
                "successful_iterations": sum(i["success"] for i in iterations),
                "failed_iterations": sum(not i["success"] for i in iterations),
                "success": all(i["success"] for i in iterations),
                "iteration_results": iterations, "concurrency_summary": summary}
        write(self.dir / tcid / "test_case_summary.json", case)
        return [case]

    def _level(self, video: dict[str, Any], chunk: int, path: Path, level: int, mode: str,
               folder: Path) -> dict[str, Any]:
        ids = [str(self.api.call("POST", "/files", data={
            "filename": str(path), "purpose": "vision", "media_type": "video"},
            files={"_": ("", b"")}).json()["id"]) for _ in range(level)]
        endpoint = "/chat/completions" if mode == "chat_completions" else "/generate_captions"
        latencies: list[float] = []
        failed = [0]
        lock = threading.Lock()

        def one(index: int, file_id: str) -> None:
            body = self.caption_body(video, file_id, chunk, False)
            if mode == "chat_completions":
                body = {"model": self.model, "id": [file_id], "max_tokens": body["max_tokens"],
                        "messages": [{"role": "user", "content": body.get("prompt") or
                                      "Describe the video."}]}
            begun = time.monotonic()
            try:
                answer = self.api.call("POST", endpoint, json=body).json()
            except (httpx.HTTPError, ValueError) as exc:
                LOG.error("Error processing file %d: %s", index, exc)
                with lock:
                    failed[0] += 1
                return
            with lock:
                latencies.append(time.monotonic() - begun)
            write(folder / f"{mode}_response_file_{index}.json", answer)

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=level) as pool:
            list(pool.map(one, range(level), ids))
        e2e = time.monotonic() - started
        for file_id in ids:
            try:
                self.api.call("DELETE", f"/files/{file_id}")
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code == 409:
                    raise ScenarioError(f"file {file_id} still in use after its level") from None
        LOG.info("Concurrency %d: %d completed, %d failed, p95 %s s", level, len(latencies),
                 failed[0], percentile(latencies, 95))
        return {"concurrency_level": level, "e2e_latency_seconds": round(e2e, 4),
                "completed_files": len(latencies), "failed_files": failed[0],
                "throughput_files_per_second": round(len(latencies) / e2e, 4) if e2e else 0,
                **{k: v for k, v in stats(latencies).items() if k != "total_measurements"},
                "latency_history": {f"file_{i}": [x] for i, x in enumerate(latencies)}}


def _truthy(value: object) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _mean(values: Any) -> float | None:
    found = [v for v in values if isinstance(v, int | float)]
    return round(sum(found) / len(found), 4) if found else None


def _decode(start: dict[str, float], end: dict[str, float]) -> dict[str, Any]:
    count = end.get("decode_latency_seconds_count", 0) - start.get(
        "decode_latency_seconds_count", 0)
    total = end.get("decode_latency_seconds_sum", 0) - start.get("decode_latency_seconds_sum", 0)
    return {"decode_latency_seconds_avg": round(total / count, 6) if count > 0 else None}


def _last_stable_p95(snapshots: list[dict[str, Any]], count: int) -> float | None:
    found = [s["p95_latency"] for s in snapshots if s["stream_count"] == count]
    return found[-1] if found else None


# --- the output JSON -----------------------------------------------------------------------

def output_document(name: str, mode: str, summary: dict[str, Any], config_id: str,
                    out: Path, started: float) -> dict[str, Any]:
    passed, failed = summary["successful_test_cases"], summary["failed_test_cases"]
    total = passed + failed
    status = "PASS" if failed == 0 and total > 0 else "FAIL" if passed == 0 else "PARTIAL"
    cases = []
    for case in summary["test_cases"]:
        if not case.get("success"):
            continue
        metrics = {"latency": {"e2e_seconds": 0, "vlm_seconds": 0, "decode_seconds": 0,
                               "chunk_latency_seconds": 0, "chunk_latency_p95_seconds": 0},
                   "throughput": {"max_sustainable_streams": 0, "files_per_second": 0},
                   "gpu": {}}
        if mode == "file_burst":
            for level, row in case["concurrency_summary"].items():
                cases.append({"test_case_id": f"{case['test_case_id']}_c{level}", "metrics": {
                    **metrics, "latency": {**metrics["latency"],
                                           "e2e_seconds": row["mean_avg_latency"] or 0},
                    "throughput": {**metrics["throughput"],
                                   "files_per_second": row["mean_throughput"] or 0}}})
            continue
        if mode == "max_live_streams":
            metrics["throughput"]["max_sustainable_streams"] = case["max_sustainable_streams"]
            metrics["latency"]["chunk_latency_p95_seconds"] = case["last_stable_p95"] or 0
        else:
            metrics["latency"]["chunk_latency_seconds"] = case["mean_avg_latency"] or 0
            metrics["latency"]["chunk_latency_p95_seconds"] = case["mean_p95_latency"] or 0
        cases.append({"test_case_id": case["test_case_id"], "metrics": metrics})
    now = datetime.datetime.now(datetime.UTC)
    return {"schema_version": "0.1", "metadata": {
        "service": "RTVI-VLM", "run_info": {
            "run_id": f"rtvi-vlm_{config_id}_{now:%Y%m%d_%H%M%S}",
            "timestamp": f"{now:%Y-%m-%dT%H:%M:%SZ}",
            "duration_seconds": round(time.monotonic() - started, 1),
            "triggered_by": "manual", "release": ""},
        "platform": {"gpu": {"model": "Unknown", "count": 0}},
        "config": {"config_id": config_id, "output_dir": str(out), "benchmark_mode": mode},
        "benchmark_name": name, "benchmark_mode": mode},
        "summary": {"total_tests": total, "passed": passed, "failed": failed,
                    "pass_rate": round(passed / total * 100, 1) if total else 0,
                    "overall_status": status},
        "test_cases": cases}


# --- main ----------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="RTVI VLM performance benchmark (stand-in)")
    parser.add_argument("--config", default="config.yaml")
    parser.add_argument("--scenario")
    parser.add_argument("--list-scenarios", action="store_true")
    parser.add_argument("--list-modes", action="store_true")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--initial-stream-count", type=int)
    parser.add_argument("--add-stream-count", type=int)
    parser.add_argument("--binary-search-refinement", dest="refine", action="store_true",
                        default=None)
    parser.add_argument("--no-binary-search-refinement", dest="refine", action="store_false")
    parser.add_argument("--concurrency-levels", type=int, nargs="+")
    parser.add_argument("--output-json")
    parser.add_argument("--dashboard-json")
    parser.add_argument("--upload", action="store_true")
    parser.add_argument("--config-id")
    return parser.parse_args()


def load(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise ScenarioError(f"Configuration file not found: {path}")
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as exc:
        raise ScenarioError(f"Invalid YAML in configuration file: {exc}") from None
    if not isinstance(data, dict):
        raise ScenarioError("Configuration must be a dictionary")
    for section in ("global", "test_scenarios"):
        if section not in data:
            raise ScenarioError(f"Missing '{section}' section")
    return data


def bcd_problems(config_path: str, out: str, glob: dict[str, Any],
                 scenarios: dict[str, Any]) -> list[str]:
    if not ("bcd" in Path(config_path).name.lower() or "bcd" in out.lower()
            or glob.get("required_live_route")):
        return []
    return [f"{name}: {url} is not rtsp://host:port/live/<id>"
            for name, spec in scenarios.items() if spec.get("benchmark_mode") in LIVE_MODES
            for video in spec.get("videos") or []
            for url in [video.get("rtsp_url"), *(video.get("rtsp_urls") or [])]
            if url and not BCD_ROUTE.match(str(url))]


def override(scenario: dict[str, Any], args: argparse.Namespace) -> None:
    mode = scenario.get("benchmark_mode", "single_file")
    if args.concurrency_levels:
        key = {"file_burst": "concurrency_levels", "concurrency": "concurrency_levels",
               "concurrent_live_streams": "stream_count"}.get(str(mode))
        if key is None:
            LOG.warning("--concurrency-levels ignored (not applicable to '%s' scenarios)", mode)
        for video in scenario.get("videos") or []:
            if key:
                video[key] = list(args.concurrency_levels)


def main() -> int:
    args = parse_args()
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO,
                        format="%(asctime)s - %(levelname)s - %(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.list_modes:
        LOG.info("Available benchmark modes:")
        for mode in MODES:
            LOG.info("  %s", mode)
        return 0
    try:
        config = load(args.config)
    except ScenarioError as exc:
        LOG.error("Error loading configuration: %s", exc)
        return 1
    scenarios: dict[str, dict[str, Any]] = config["test_scenarios"] or {}
    if args.list_scenarios:
        LOG.info("Available test scenarios:")
        for name, spec in scenarios.items():
            LOG.info("  %s: %s (mode: %s, %d video files)", name,
                     spec.get("description", "No description"),
                     spec.get("benchmark_mode", "single_file"), len(spec.get("videos") or []))
        return 0
    glob: dict[str, Any] = config["global"] or {}
    base = os.environ.get("RTVI_BACKEND") or glob.get("rtvi_backend") or "http://localhost:8000"
    out = Path(str(glob.get("output_dir", "rtvi-perf-report")))
    LOG.info("Using RTVI backend: %s", base)
    LOG.info("Output directory: %s", out)
    if args.scenario and args.scenario not in scenarios:
        LOG.error("Error: Scenario '%s' not found in configuration", args.scenario)
        LOG.error("Available scenarios: %s", list(scenarios))
        return 1
    chosen = {args.scenario: scenarios[args.scenario]} if args.scenario else scenarios
    problems = bcd_problems(args.config, str(out), glob, chosen)
    if problems:
        LOG.error("BCD live-source validation failed: %s", "; ".join(problems))
        return 1
    api = Api(str(base))
    started = time.monotonic()
    failures: list[tuple[str, str]] = []
    for name, spec in chosen.items():
        LOG.info("=== Running scenario: %s ===", name)
        override(spec, args)
        scenario = Scenario(name, spec, glob, api, out, args)
        try:
            summary = scenario.run()
            scenario.after()
        except (ScenarioError, httpx.HTTPError) as exc:
            LOG.error("Scenario '%s' failed: %s", name, exc)
            failures.append((name, str(exc)))
            if "post-scenario verification" in str(exc) or "cleanup failed" in str(exc):
                LOG.error("Aborting benchmark suite because scenario cleanup failed.")
                break
            continue
        passed, total = summary["successful_test_cases"], summary["total_test_cases"]
        if passed:
            LOG.info("Scenario '%s' completed successfully!", name)
        else:
            LOG.error("Scenario '%s' failed - no test cases passed!", name)
            failures.append((name, f"All {total} test case(s) failed"))
        LOG.info("Results: %d/%d test cases passed", passed, total)
        if passed and args.output_json and scenario.mode in JSON_MODES:
            target = Path(args.output_json)
            target = target if target.is_absolute() else out / target
            config_id = args.config_id or out.name or "default"
            write(target, output_document(name, scenario.mode, summary, config_id, out,
                                          started))
            LOG.info("VSS result JSON: %s", target)
    LOG.info("=" * 60)
    LOG.info("BENCHMARK SUITE COMPLETED")
    LOG.info("=" * 60)
    LOG.info("Total execution time: %.1f seconds", time.monotonic() - started)
    LOG.info("Scenarios run: %d", len(chosen))
    LOG.info("Successful: %d", len(chosen) - len(failures))
    LOG.info("Failed: %d", len(failures))
    if failures:
        LOG.error("Failed scenarios:")
        for name, error in failures:
            LOG.error("  - %s: %s", name, error)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
