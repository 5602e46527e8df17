"""U-Net and DenseNet for the export fixtures: networks that concatenate feature maps.

Both keep tensors alive across many operators: U-Net's encoder maps wait for
the decoder (``torch.cat`` of skip and upsampled map), DenseNet's every layer
reads the concatenation of all earlier maps of its block. Written as the
common PyTorch implementations write them (milesial's Pytorch-UNet,
torchvision's DenseNet); the constructor arguments give the small fixture
and the full-size network.
"""
import torch
from torch import nn
from torch.nn import functional as F


# ------------------------------------------------------------------- U-Net
class DoubleConv(nn.Sequential):
    def __init__(self, cin, cout, mid=None):
        mid = mid or cout
        super().__init__(nn.Conv2d(cin, mid, 3, padding=1, bias=False), nn.BatchNorm2d(mid),
                         nn.ReLU(inplace=True),
                         nn.Conv2d(mid, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class Down(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(nn.MaxPool2d(2), DoubleConv(cin, cout))


class Up(nn.Module):
    """Upsample the deeper map (transposed conv halving its channels, or bilinear resize),
    pad it to the skip's size, concatenate the skip first, double conv."""

    def __init__(self, c_low, c_skip, cout, bilinear):
        super().__init__()
        if bilinear:
            self.up, c_up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True), c_low
        else:
            self.up, c_up = nn.ConvTranspose2d(c_low, c_low // 2, kernel_size=2, stride=2), c_low // 2
        self.conv = DoubleConv(c_skip + c_up, cout)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        dy, dx = x2.size()[2] - x1.size()[2], x2.size()[3] - x1.size()[3]
        x1 = F.pad(x1, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([x2, x1], dim=1))


class UNet(nn.Module):
    """An encoder of MaxPool+DoubleConv stages (``widths``), a decoder that reads each
    encoder map back through ``torch.cat``. ``bilinear`` picks each decoder stage's
    upsampling, innermost first (the fixture mixes both, so both ops are exported)."""

    def __init__(self, in_channels=3, num_classes=2, widths=(8, 16, 32, 64),
                 bilinear=(False, True, False)):
        super().__init__()
        self.inc = DoubleConv(in_channels, widths[0])
        self.downs = nn.ModuleList(Down(cin, cout) for cin, cout in zip(widths[:-1], widths[1:]))
        self.ups = nn.ModuleList()
        channels = widths[-1]
        for skip, bil in zip(reversed(widths[:-1]), bilinear):
            self.ups.append(Up(channels, skip, skip, bil))
            channels = skip
        self.outc = nn.Conv2d(widths[0], num_classes, 1)

    def forward(self, x):
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(skips[-1]))
        x = skips.pop()
        for up in self.ups:
            x = up(x, skips.pop())
        return self.outc(x)


# ---------------------------------------------------------------- DenseNet
class DenseLayer(nn.Module):
    def __init__(self, cin, growth, bn_size):
        super().__init__()
        self.norm1, self.relu1 = nn.BatchNorm2d(cin), nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2, self.relu2 = nn.BatchNorm2d(bn_size * growth), nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features):
        concated = torch.cat(features, 1)
        bottleneck = self.conv1(self.relu1(self.norm1(concated)))
        return self.conv2(self.relu2(self.norm2(bottleneck)))


class DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers, cin, growth, bn_size):
        super().__init__()
        for i in range(num_layers):
            self.add_module(f"denselayer{i + 1}", DenseLayer(cin + i * growth, growth, bn_size))

    def forward(self, init_features):
        features = [init_features]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class Transition(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(nn.BatchNorm2d(cin), nn.ReLU(inplace=True),
                         nn.Conv2d(cin, cout, 1, bias=False), nn.AvgPool2d(2, 2))


class DenseNet(nn.Module):
    """torchvision's DenseNet (DenseNet-121 is growth 32, blocks (6, 12, 24, 16), 64 initial
    features, bottleneck 4)."""

    def __init__(self, growth=8, blocks=(2, 3, 2), init_features=16, bn_size=2, num_classes=10):
        super().__init__()
        layers = [nn.Conv2d(3, init_features, 7, 2, 3, bias=False), nn.BatchNorm2d(init_features),
                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
        channels = init_features
        for i, num_layers in enumerate(blocks):
            layers.append(DenseBlock(num_layers, channels, growth, bn_size))
            channels += num_layers * growth
            if i + 1 < len(blocks):
                layers.append(Transition(channels, channels // 2))
                channels //= 2
        layers.append(nn.BatchNorm2d(channels))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(channels, num_classes)

    def forward(self, x):
        out = F.relu(self.features(x), inplace=True)
        out = torch.flatten(F.adaptive_avg_pool2d(out, (1, 1)), 1)
        return self.classifier(out)
