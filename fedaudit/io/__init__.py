"""Reading and writing the files fedaudit consumes and produces (safetensors only; no pickle)."""
