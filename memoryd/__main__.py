"""`python -m memoryd`: the `memoryd` command."""

from memoryd.entry import main

if __name__ == "__main__":
    main()
