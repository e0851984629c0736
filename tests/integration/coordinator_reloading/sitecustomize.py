"""Makes a worker's Kafka client see its group's coordinator reloading (test_worker_faults puts
this directory on the workers' PYTHONPATH): the first QS_TEST_COORDINATOR_RELOADING OffsetFetch
answers (every one: -1) are what Kafka answers while it reloads a group's coordinator, v3 with
NOT_COORDINATOR and no partitions at all (Kafka 4.1.1, right after a node that paused past its
broker session resumed). QS_TEST_COMMITTED_OFFSETS_WAIT_S shortens how long the worker waits
for its committed offsets."""

import os

_RELOADING = int(os.environ.get("QS_TEST_COORDINATOR_RELOADING", "0"))

if _RELOADING:
    from typing import Any

    from aiokafka.client import AIOKafkaClient
    from aiokafka.protocol.commit import OffsetFetchRequest, OffsetFetchResponse_v3

    from app.pipeline import faust_patches

    _send = AIOKafkaClient.send
    _left = [_RELOADING]

    async def _reloading_send(self: AIOKafkaClient, node_id: int, request: Any,
                              **kwargs: Any) -> Any:
        if request.API_KEY == OffsetFetchRequest.API_KEY and _left[0]:
            _left[0] -= 1
            return OffsetFetchResponse_v3(throttle_time_ms=0, topics=[], error_code=16)
        return await _send(self, node_id, request, **kwargs)

    AIOKafkaClient.send = _reloading_send  # type: ignore[method-assign]

    _wait_s = os.environ.get("QS_TEST_COMMITTED_OFFSETS_WAIT_S")
    if _wait_s:
        _install = faust_patches.install

        def _install_with_wait(app: Any) -> None:
            _install(app)
            faust_patches.OffsetFetchGuard(wait_s=float(_wait_s)).install()

        faust_patches.install = _install_with_wait
