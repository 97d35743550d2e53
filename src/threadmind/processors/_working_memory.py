"""WorkingMemory: adds the working-memory instruction (with the stored data) as a memory system message.

Reference §3.3. The instruction is the read-only variant when the run is read-only.
"""

from __future__ import annotations

from collections.abc import Callable

from .._config import MemoryConfig, WorkingMemoryConfig
from .._results import WorkingMemoryTemplate
from .._working_memory_schema import SchemaSource
from ..stores import Store
from ._access import MemoryAccess, as_access
from ._protocol import ProcessInputArgs
from ._working_memory_text import instruction, readonly_instruction, template_for

__all__ = ("WorkingMemory",)

TemplateProvider = Callable[[MemoryConfig], WorkingMemoryTemplate | None]


class WorkingMemory:
    """Processor ``working-memory``: the model sees its working memory and how to update it.

    ``schema``: a JSON Schema dict, a Pydantic model class or a msgspec Struct type (``ConfigError`` here when
    it is none of them or invalid).
    """

    id = "working-memory"
    name = "WorkingMemory"

    def __init__(
        self,
        storage: Store | MemoryAccess,
        template: str | None = None,
        scope: str = "resource",
        read_only: bool = False,
        *,
        schema: SchemaSource | None = None,
        template_provider: TemplateProvider | None = None,
    ) -> None:
        self.storage = as_access(storage)
        self.template = template
        self.schema = schema
        if schema is not None:
            WorkingMemoryConfig(enabled=True, template=template, schema=schema)  # fails early on a bad schema
        self.scope = scope
        self.read_only = read_only
        self.template_provider = template_provider

    def _template(self, config: MemoryConfig) -> WorkingMemoryTemplate:
        if self.template_provider is not None:
            provided = self.template_provider(config)
            if provided is not None:
                return provided
        own = template_for(WorkingMemoryConfig(enabled=True, template=self.template, schema=self.schema))
        assert own is not None
        return own

    async def process_input(self, args: ProcessInputArgs) -> None:
        context = args.context
        thread_id = context.thread_id or args.message_list.thread_id
        resource_id = context.resource_id or args.message_list.resource_id
        if not thread_id and not resource_id:
            return None
        data: str | None = None
        if self.scope == "thread":
            thread = context.thread
            if thread is None and thread_id:
                thread = await self.storage.get_thread(thread_id)
            value = (thread.metadata or {}).get("workingMemory") if thread is not None else None
            data = value if isinstance(value, str) else None
        elif resource_id:
            resource = await self.storage.get_resource(resource_id)
            data = resource.working_memory if resource is not None else None
        config = context.memory_config
        if self.read_only or config.read_only or not config.working_memory.managed_by_agent:
            text = readonly_instruction(data)
        else:
            text = instruction(self._template(context.memory_config), data,
                               vnext=context.memory_config.working_memory.version == "vnext")
        args.message_list.add_system(text, "memory")
        return None
