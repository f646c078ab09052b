"""Front ends that mirror other libraries' Python APIs over puffer's one trainer."""
