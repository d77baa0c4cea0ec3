"""The only two doors to the outside: `proxysql` (admin port 6032) and `backend` (MySQL/MariaDB nodes).

Both own every timeout. Nothing else in the product opens a connection to a ProxySQL or a backend.
"""
