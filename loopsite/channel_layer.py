"""The channel layer over Redis: channels_redis's pub/sub layer, whose sockets open while Redis
is away.

Pub/sub costs a wake-up one PUBLISH, heard by each web process on one subscribed connection;
channels_redis.core's lists cost every socket two round trips and a Lua script per message (4.3
against 1.2 ms of daphne's CPU a wake-up, `bench/web.py`). Nothing is kept for a process not
listening, which Loop needs no more than it needs the message: the event log is the truth, and a
socket catches up from it.

channels gives each consumer a channel of its own before the consumer's code runs, and the
pub/sub layer subscribes to it there: with Redis down or silent, that failed every socket with a
500 before chat/consumers.py could say live updates are delayed and read the log instead. Here
the channel is made in this process whatever Redis does, and subscribed to only when Redis
answers in time: Loop sends nothing to a socket's own channel (every message goes to a group,
delivered in the process to the group's channels), and the socket joins its groups itself, with
its own bounds and retries.
"""

import asyncio
import logging
import uuid
from typing import Any

from channels_redis.pubsub import RedisPubSubChannelLayer

logger = logging.getLogger(__name__)

SUBSCRIBE_SECONDS = 2.0  # chat/consumers.py's bound on any one call of the layer


class PubSubChannelLayer(RedisPubSubChannelLayer):  # type: ignore[misc]
    async def new_channel(self, prefix: str = "specific.") -> str:
        layer: Any = self._get_layer()
        channel = f"{layer.prefix}{prefix}{uuid.uuid4().hex}"
        layer.channels[channel] = asyncio.Queue()
        try:
            subscribing = layer._get_shard(channel).subscribe(channel)
            await asyncio.wait_for(subscribing, SUBSCRIBE_SECONDS)
        except Exception as error:  # Redis down or silent: the socket goes on without it
            logger.debug("A socket's own channel is not subscribed (%s)", error)
        return channel
