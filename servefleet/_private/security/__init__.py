"""Identities and their proof: TLS files, development certificates, tokens and roles."""
