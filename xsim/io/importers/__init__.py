"""Robots and assets from files: MJCF through MuJoCo's own compiler (``mjcf.py``), URDF through
yourdfpy (``urdf.py``). ``ModelBuilder.add_mjcf`` and ``add_urdf`` call these; each needs an
optional package (``xsim[mjcf]``, ``xsim[urdf]``) and says so when it is missing."""
