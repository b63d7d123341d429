"""The `pgworkerd` command: `main` parses, one module a command group (`daemon`, `jobs`,
`queues`, `health`) with their formatting, and the parts they share (`common`)."""
