"""Identities and their proof: TLS files, development certificates, tokens
and roles; the hop pass a replica checks (`hop`) and the one a caller
carries (`hop_client`).

May import: nothing (only _private's top-level modules).
"""
