"""The language model servefleet ships (`servefleet.llm`): an engine
interface (`engine`), the built-in n-gram engine, the deployment that holds
an engine in each replica (`server`) and the OpenAI-compatible HTTP ingress
in front of it (`openai_ingress`).

May import: applications, batching, configuration, edge, embeddings, public.
"""
