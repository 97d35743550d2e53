"""Quick start: a memory on the embedded default (SQLite + hnswlib + the offline hash embedder)."""

import anyio

from threadmind import Memory, Message
from threadmind.embedders import HashEmbedder
from threadmind.stores import HnswVectorStore, SQLiteStore


async def main() -> None:
    memory = Memory(
        storage=SQLiteStore("memory.db"),
        vector=HnswVectorStore("memory.vectors"),
        embedder=HashEmbedder(dim=384),
        options={"lastMessages": 10, "semanticRecall": {"topK": 3, "messageRange": 1}},
    )
    async with memory:  # starts the actors; leaving the block drains and closes everything
        trip = await memory.create_thread(resource_id="ada", title="Trip planning")
        await memory.save_messages([
            Message.user("I want to fly to Tokyo in April", thread_id=trip.id, resource_id="ada"),
            Message.assistant("Great - economy or business?", thread_id=trip.id, resource_id="ada"),
        ])
        chat = await memory.create_thread(resource_id="ada", title="Small talk")
        await memory.save_messages([Message.user("I love ramen", thread_id=chat.id, resource_id="ada")])

        history = await memory.recall(trip.id, resource_id="ada")  # the last 10 messages, oldest first
        for m in history.messages:
            print(f"{m.role}: {m.text}")

        # Semantic recall searches every thread of the resource; hits come with their neighbours.
        found = await memory.recall(chat.id, resource_id="ada", vector_search_string="a flight to Japan")
        print("remembered:", [m.text for m in found.messages if m.thread_id == trip.id])


anyio.run(main)
